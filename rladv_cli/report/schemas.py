"""The JSON Schemas rladv publishes in ``schemas/``: a rollout row, an output row, the settings and the report,
generated from the code (``python -m rladv_cli.report.schemas schemas``) and checked against it by a test."""
from __future__ import annotations

from ..config.settings import Config
from ..contract.models import OutputRow, RolloutRow
from .model import Report


def json_schemas() -> dict[str, dict]:
    """The JSON Schemas rladv publishes in ``schemas/``, by file name."""
    return {
        "rollout.schema.json": RolloutRow.model_json_schema(),
        "output.schema.json": OutputRow.model_json_schema(),
        "config.schema.json": Config.model_json_schema(),
        "report.schema.json": Report.model_json_schema(),
    }


def write_json_schemas(folder: str) -> list[str]:
    """Regenerate ``schemas/*.json`` (``python -m rladv_cli.report.schemas schemas``; the folder is made when missing);
    returns the paths written."""
    import json
    from pathlib import Path

    written = []
    Path(folder).mkdir(parents=True, exist_ok=True)
    for name, schema in json_schemas().items():
        path = Path(folder) / name
        path.write_text(json.dumps(schema, indent=2, sort_keys=True) + "\n")
        written.append(str(path))
    return written


if __name__ == "__main__":
    import sys

    for p in write_json_schemas(sys.argv[1] if len(sys.argv) > 1 else "schemas"):
        print(p)
