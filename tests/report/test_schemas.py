"""The committed JSON Schemas are exactly what the pydantic models generate."""
import json
from pathlib import Path

import pyarrow.parquet as pq

from conftest import ROOT, SAMPLES
from rladv_cli.contract.models import RolloutRow
from rladv_cli.contract.schema import COLUMNS
from rladv_cli.report.schemas import json_schemas, write_json_schemas

SCHEMAS = ROOT / "schemas"


def test_committed_schemas_match_models():
    generated = json_schemas()
    on_disk = {p.name for p in SCHEMAS.glob("*.json")}
    assert on_disk == set(generated), "regenerate with: python -m rladv_cli.report.schemas schemas"
    for name, schema in generated.items():
        committed = json.loads((SCHEMAS / name).read_text())
        assert committed == schema, f"{name} drifted from the code; run: python -m rladv_cli.report.schemas schemas"


def test_regenerating_into_a_new_folder_writes_the_committed_files(tmp_path):
    written = write_json_schemas(str(tmp_path / "new" / "schemas"))  # made when missing (was a traceback)
    assert sorted(Path(p).name for p in written) == sorted(p.name for p in SCHEMAS.glob("*.json"))
    for p in written:
        assert Path(p).read_bytes() == (SCHEMAS / Path(p).name).read_bytes()


def test_rollout_schema_lists_every_contract_column():
    props = json_schemas()["rollout.schema.json"]["properties"]
    assert set(COLUMNS) <= set(props)
    assert json_schemas()["rollout.schema.json"]["required"] == ["response_mask"]


def test_sample_rows_satisfy_the_rollout_model():
    for path in sorted(SAMPLES.glob("*.parquet")):
        if path.name.endswith(".adv.parquet"):
            continue
        for row in pq.read_table(path).slice(0, 5).to_pylist():
            RolloutRow.model_validate(row)
