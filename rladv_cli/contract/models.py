"""The pydantic models of a rollout row and of the columns rladv adds (``schemas/rollout.schema.json``,
``schemas/output.schema.json``), derived from the contract's tables (``schema``): what a row of each looks like,
for the published JSON Schemas and for callers that validate single rows."""
from __future__ import annotations

from typing import Literal, Optional

from pydantic import BaseModel, ConfigDict, Field, create_model

from .schema import COLUMNS, OUTPUT_COLUMNS

_PY_TYPES = {
    "mask": Optional[list[Literal[0, 1]]],
    "float_list": Optional[list[float]],
    "call_list": Optional[list[float]],
    "int_list": Optional[list[int]],
    "float": Optional[float],
    "label": Optional[str | int],
    "flag": Optional[bool],
}

RolloutRow = create_model(
    "RolloutRow",
    __config__=ConfigDict(extra="allow", title="rladv rollout row"),
    __doc__="One trajectory of a rollout dataset (one Parquet row). Token-aligned lists share one length "
    "L >= 1; extra columns are carried through unchanged.",
    **{
        c.name: (list[Literal[0, 1]], Field(description=c.description)) if c.name == "response_mask"
        else (_PY_TYPES[c.kind], Field(default=None, description=c.description))
        for c in COLUMNS.values()
    },
)


class OutputRow(BaseModel):
    """Columns rladv adds to each row (all lists have the row's length)."""

    model_config = ConfigDict(extra="allow", title="rladv output row")
    token_level_rewards: list[float] = Field(description=OUTPUT_COLUMNS["token_level_rewards"])
    response_mask: list[Literal[0, 1]] = Field(description=OUTPUT_COLUMNS["response_mask"])
    loss_mask: list[Literal[0, 1]] = Field(description=OUTPUT_COLUMNS["loss_mask"])
    advantages: list[float] = Field(description=OUTPUT_COLUMNS["advantages"])
    returns: list[float] = Field(description=OUTPUT_COLUMNS["returns"])
    rollout_is_weights: Optional[list[float]] = Field(
        default=None, description="only with --rollout-is: the importance weights"
    )
