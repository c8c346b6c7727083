"""Trainers' own rollout logs as rollout datasets (docs/dumps.md, "Trainers' logs"): ``rladv convert --from
FORMAT SRC...``. Each format maps its fields onto the data contract and says what is absent and what that rules
out; JSONL files are read with polars (``scan_ndjson``) where their rows are columns, line by line where a row
is a walk (prime-rl), streamed to the output (``AtomicParquetWriter``).

verl-jsonl  verl 0.9.1's ``trainer.rollout_data_dir``: one ``{step}.jsonl`` per step, one line per sample,
            ``input`` (the prompt, decoded), ``output`` (the response, decoded), ``gts``, ``score`` (the row's
            total score), ``step``, and the reward function's extra fields (``RayPPOTrainer._write_generations``).
            ``uid``: the line's ``uid`` when there is one, else its ``input`` (verl samples each prompt ``n`` times
            and decodes it the same way each time). No token lists: rladv computes it at sequence level, one
            position per row (docs/contract.md §1), so outcome estimators only.

nemo-rl     NeMo-RL's per-step training dump ``train_data_step{N}.jsonl`` in the log dir (grpo.py "Log training
            data"; ppo.py writes the same fields), written by ``Logger.log_batched_dict_as_jsonl``: one line per
            sample, each field a batch of one (``[r]``, ``[[...]]`` padded to the step's longest sequence),
            ``content``, ``rewards``, ``input_lengths``, ``token_ids``, ``token_loss_mask``, ``sample_loss_mask``,
            ``advantages``, ``generation_logprobs``, ``prev_logprobs``, ``idx``; optionally ``agent_ref`` and
            ``filtered_rewards``. A line is unpadded with ``input_lengths``; its response is the tokens from the
            first ``token_loss_mask`` 1 to the input length (the tokens before it are the prompt: NeMo-RL groups
            samples by equal prompt token ids; tool observations after it keep mask 0). ``responses``,
            ``response_mask``, ``old_log_probs`` (prev_logprobs), ``rollout_log_probs`` (generation_logprobs),
            ``advantages`` are that slice; ``score`` the reward; ``uid`` a digest of the prompt's token ids;
            ``step`` the N of the file name. No values and no reference log-probs: not gae, not KL shaping.

trl         TRL 1.16.0's GRPO completion log (``log_completions``): ``completions/completions_{step:05d}.parquet``
            written by ``GRPOTrainer.log`` from its ``_logs`` (the last generation batch, in the trainer's order:
            consecutive blocks of ``num_generations``): ``step``, ``prompt``, ``completion`` (text, or chat messages),
            one column per reward function, the reward functions' extra columns, ``advantage``. ``uid``: a digest
            of the prompt (TRL repeats a prompt for its ``num_generations`` completions); ``score``: the NaN-ignoring
            sum of the number columns between ``completion`` and ``advantage`` (TRL's reward with weights 1);
            ``advantages``: ``[advantage]``. No token lists: sequence level, as verl-jsonl. A row whose rewards
            are all missing (TRL's unscorable completion) gets a null score, which ``--convention trl`` leaves
            out of its block's statistics and every other convention refuses.

slime       slime's ``--save-debug-rollout-data`` (slime/observability/rollout_data_utils.py
            ``save_debug_rollout_data``): ``torch.save({"rollout_id": N, "samples": [Sample.to_dict(), ...]})``
            per rollout, read with ``torch.load(weights_only=True)`` (``--trust-pickle`` for a file that needs
            more). ``responses``: the last ``response_length`` of ``tokens``; ``response_mask``: ``loss_mask``
            (response-only in slime; None is all 1, a ``remove_sample`` all 0, as ``_convert_samples_to_train_data``);
            ``rollout_log_probs``; ``score``: ``reward`` (a dict reward: ``reward[--reward-key]``); ``uid``:
            ``rollout_id:group_index``; ``step``: ``rollout_id``. No advantages, old/reference log-probs or values.

prime-rl    prime-rl's ``rollouts/step_N/train/effective/traces.jsonl`` (``FileMonitor.log_episodes``): one
            verifiers ``Episode.to_record()`` per line, ``group.id``, ``traces[]`` of message-graph ``nodes[]``
            (``token_ids``, ``mask``, ``logprobs``, ``advantages``, ``reference_logprobs`` over the sampled
            tokens, ``parent``) and named ``rewards``. One row per trainable branch (``iter_trainable_branches``)
            of each clean trainable trace: the branch's tokens from its first trained token, the per-token
            values spread as ``Branch.spread`` does; ``score`` the trace's reward; ``uid`` the group id.

areal       AReaL 1.0.4's ``dump_to_file`` (``WorkflowExecutor._dump_trajectory``):
            ``rollout/{tail_version}/{task_id}.jsonl``, one line per sample of the task's group: ``task_id``,
            ``sample_idx``, ``seqlen``, ``prompt_len``, ``head_version``, ``tail_version``, ``reward``, ``prompt``,
            ``completion`` (decoded text). Sequence level; ``uid`` the task, ``step`` the tail version.
"""
from __future__ import annotations

import itertools
import os
from typing import Optional, Sequence

import pyarrow as pa

from ...errors import InputError
from ..write import AtomicParquetWriter, check_output_path, signals_deferred
from .common import CHUNK_ROWS, SEQUENCE_LEVEL, TOKEN_CHUNK_ROWS, Format, Imported, Options, files_of
from .nemo_rl import NEMO_RL
from .prime_rl import PRIME_RL
from .sequence import AREAL, TRL, VERL, trl_rewards
from .slime import SLIME

__all__ = ["FORMATS", "CHUNK_ROWS", "SEQUENCE_LEVEL", "TOKEN_CHUNK_ROWS", "Imported", "convert_log", "trl_rewards"]

REGISTRY: dict[str, Format] = {f.name: f for f in (VERL, NEMO_RL, TRL, SLIME, PRIME_RL, AREAL)}
FORMATS = tuple(REGISTRY)


def convert_log(fmt: str, sources: Sequence[str | os.PathLike], out: str | os.PathLike, *,
                trust_pickle: bool = False, reward_key: Optional[str] = None) -> Imported:
    """Convert a trainer's log (``fmt``, one of ``FORMATS``) to one Parquet file at ``out``, written atomically:
    files in step order, every line checked (a bad or truncated line is a one-line error naming its file and
    line), one schema (a file whose fields differ is an error), nothing written on an error. ``trust_pickle``
    and ``reward_key`` are slime's (``--trust-pickle``, ``--reward-key``)."""
    if fmt not in REGISTRY:
        raise InputError(fmt, f"not a format rladv reads; choose one of {', '.join(FORMATS)}")
    form = REGISTRY[fmt]
    if fmt != "slime" and (trust_pickle or reward_key is not None):
        raise InputError(fmt, f"{'--trust-pickle' if trust_pickle else '--reward-key'} is for slime's torch.save "
                         "files; this format is JSON or Parquet")
    out = os.fspath(out)
    files = files_of(form, sources)
    check_output_path(out, files)
    found = form.check(files) if form.check is not None else None
    options = Options(trust_pickle=trust_pickle, reward_key=reward_key, found=found)
    tables = ((path, table, note) for path in files for table, note in form.read(path, options))
    first = next(tables, None)
    if first is None:
        raise InputError(files[0], "holds no sample to convert" if len(files) == 1 else
                         f"and the {len(files) - 1} other file(s) hold no sample to convert")
    schema, rows, notes = first[1].schema, 0, set()
    with AtomicParquetWriter(out, schema) as sink:
        for path, table, note in itertools.chain([first], tables):
            if table.schema.names != schema.names:
                raise InputError(path, f"fields {table.schema.names} differ from {files[0]}'s {schema.names}")
            try:
                table = table.cast(schema)
            except (pa.ArrowInvalid, pa.ArrowNotImplementedError) as err:
                raise InputError(path, f"a field's values do not fit its type in {files[0]}: "
                                 f"{str(err).splitlines()[0]}") from None
            sink.write(table)
            rows, notes = rows + table.num_rows, notes | {note}
        sink.finish()
        with signals_deferred():
            sink.commit()
    sources_, absent = form.describe(files, notes, options)
    return Imported(out, rows, len(files), list(schema.names), sources_, absent)
