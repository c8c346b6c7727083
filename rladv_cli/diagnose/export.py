"""``rladv inspect --uid U --export DIR``: one uid group as a reproducer folder that travels (the group's rows,
only the columns the run reads, and the ``rladv compute`` line that gives the full run's numbers)."""
from __future__ import annotations

import contextlib
import os
import shlex
from typing import Sequence

import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from ..config.flags import command_flags, named
from ..config.settings import Config, batch_column, on_columns
from ..contract import validation
from ..errors import ConfigError, OutputError
from ..estimators.registry import DEFAULT_GROUP_ESTIMATOR, ESTIMATORS
from ..io.frames import open_rows
from ..io.read import RowSource
from ..io.write import SideFiles, check_output_path
from .views import PathLike, group_rows, pad_widths, scope_of


def _padded_like_the_dataset(ds: RowSource, table: pa.Table, estimator: str, settings: dict):
    """The export's ``Config``: ``settings`` with ``pad_width`` raised to the widest of the group's batches in
    the dataset (``pad_widths``) when that is wider than the group's own longest row, so the group alone sums
    its totals as the full run does; and the widths of the group's batches."""
    key = batch_column(settings.get("batch_key"))
    full = pad_widths(ds, key) or {}
    keys = table[key].to_pylist() if key else [None] * table.num_rows
    widths = [full[k] for k in dict.fromkeys(keys) if k in full]
    own = int(pc.max(pc.list_value_length(table["response_mask"])).as_py() or 0) if "response_mask" in table.column_names else 0
    wanted = max([w for w in widths if w > own] + [settings.get("pad_width") or 0])
    return Config(estimator=estimator, **{**settings, "pad_width": wanted or None}), widths


def export_group(inputs: Sequence[PathLike] | PathLike, uid: str, folder: PathLike, *,
                 estimator: str = DEFAULT_GROUP_ESTIMATOR, **settings) -> list[str]:
    """Write a minimal reproducer of group ``uid`` into ``folder`` (created when missing): ``group.parquet`` (the
    group's rows, only the columns the run reads) and ``command.txt`` (the ``rladv compute`` line, with paths
    relative to ``folder``, so the folder can travel, and ``--pad-width`` where the group's batch in the dataset
    is wider than its own rows, so that the numbers are the full run's to the bit). Whitened and batch-wide
    estimators also depend on rows outside the group; the command file says so. Returns the paths written."""

    Config(estimator=estimator, **settings)  # bad settings fail before anything is read
    folder = os.fspath(folder)
    if os.path.exists(folder) and not os.path.isdir(folder):
        raise ConfigError(f"--export {folder}: exists and is not a folder")
    ds = open_rows(inputs, settings.get("columns"), settings.get("where"))
    settings = on_columns(settings, ds.columns)  # the data's step column is the batch key unless given
    table, _ = group_rows(ds, uid)
    run, widths = _padded_like_the_dataset(ds, table, estimator, settings)
    needed = set(validation.required_columns(
        ds.columns, ESTIMATORS[estimator].reads, kl=bool(settings.get("kl_coef")),
        rollout_correction=bool(settings.get("rollout_rs") or settings.get("rollout_is")),
        batch_key=batch_column(settings.get("batch_key")), reward_components=settings.get("reward_components") or (),
        tool_rewards=settings.get("tool_reward_coef") is not None,
        truncated=settings.get("stop_properly_penalty_coef") is not None))
    needed |= {c for c in ("uid", "attention_mask", "loss_mask", "responses", "old_log_probs", "rollout_log_probs",
                           "session_id", "output_index") if c in ds.columns}
    parquet = pa.BufferOutputStream()
    pq.write_table(table.select([c for c in ds.columns if c in needed]), parquet, compression="zstd")
    # group.parquet holds the contract's column names, so its command maps none (--column), and only the rows
    # --where kept, so its command filters nothing (the predicate's columns may not be in it)
    changed = {k: v for k, v in run.changed().items() if k not in ("columns", "where")}
    command = ["rladv", "compute", "group.parquet", "--estimator", estimator, *command_flags(changed), "-o",
               "group.adv.parquet"]
    text = " ".join(shlex.quote(part) for part in command) + "\n"
    text += "# run it in this folder"
    if run.pad_width is not None:
        text += (f"; --pad-width {run.pad_width}: verl sums each row padded to its batch's longest response, "
                 f"{run.pad_width} positions in the full dataset, and that width decides how the totals round")
    text += "\n"
    if len(set(widths)) > 1:
        text += (f"# note: the group's rows are in batches padded to {', '.join(map(str, sorted(set(widths))))} "
                 "positions; one --pad-width cannot give each its width, so totals in the narrower ones can "
                 "differ from the full run's by float32 rounding\n")
    if scope_of(ESTIMATORS[estimator], settings) == "dataset":
        text += (f"# note: with these settings {estimator} also depends on rows outside this group (batch "
                 "whitening, a batch-wide scale, an adaptive KL coefficient or rollout correction's batch "
                 "statistics); on this file alone the numbers can differ from the full dataset's\n")
    created = not os.path.isdir(folder)
    if created:
        try:
            os.makedirs(folder)
        except OSError as err:
            raise OutputError(f"{named('folder', os.fspath(folder))}: cannot create the folder ({err.strerror})") from None
    data, script = os.path.join(folder, "group.parquet"), os.path.join(folder, "command.txt")
    try:
        for target in (data, script):
            check_output_path(target, ds.paths, option="folder", parquet=False)
        with SideFiles() as files:  # both files, or neither
            files.write(data, parquet.getvalue().to_pybytes())
            files.write(script, text)
            files.commit()
    except BaseException:
        if created:  # the folder this export made, empty again: it goes too (never masking the error)
            with contextlib.suppress(OSError):
                os.rmdir(folder)
        raise
    return [data, script]
