"""Dense ids for batches (``--batch-key`` values) and groups (``(batch, uid)`` pairs), by first appearance."""
from __future__ import annotations

from collections import defaultdict

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from ..errors import InputError
from .columns import numpy_of, prompt_keys


def _encode(column: pa.ChunkedArray) -> tuple[np.ndarray, list]:
    """(chunk-local codes ``(B,)``, distinct values) of an Arrow column."""
    enc = pc.dictionary_encode(column).combine_chunks()
    return numpy_of(enc.indices).astype(np.int64), enc.dictionary.to_pylist()


class Labels:
    """Maps rows to dense batch ids and group ids; groups never cross batches, and need not be contiguous."""

    def __init__(self, batch_key: str | None):
        self.batch_key = batch_key
        self.batches: dict[object, int] = {}
        self.groups: dict[tuple[int, object], int] = {}
        self.sessions: dict[tuple[int, object], int] = {}

    @staticmethod
    def _first_appearance(codes: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        """Distinct codes in order of first appearance, and each row's position in that list."""
        uniq, first, inverse = np.unique(codes, return_index=True, return_inverse=True)
        order = np.argsort(first, kind="stable")
        rank = np.empty_like(order)
        rank[order] = np.arange(order.size)
        return uniq[order], rank[inverse]

    @staticmethod
    def _check_not_null(table: pa.Table, column: str, path: str, start: int, why: str) -> None:
        col = table[column]
        t = col.type
        if pa.types.is_nested(t) or not (pa.types.is_primitive(t) or pa.types.is_string(t) or pa.types.is_large_string(t)
                                         or pa.types.is_dictionary(t)):
            raise InputError(path, f"has type {t}; a label needs one string or number per row", column=column)
        if col.null_count:
            bad = int(np.flatnonzero(col.is_null().to_numpy(zero_copy_only=False))[0])
            raise InputError(path, f"is null; {why}", row=start + bad, column=column)
        if pa.types.is_floating(t):
            nan = pc.is_nan(col).to_numpy(zero_copy_only=False)
            if nan.any():
                raise InputError(path, f"is NaN; {why}", row=start + int(np.flatnonzero(nan)[0]), column=column)

    def batch_ids(self, table: pa.Table, path: str, start: int) -> np.ndarray:
        """Dense batch id ``(B,) int64`` of each row of a chunk (all 0 without ``--batch-key``)."""
        n = table.num_rows
        if self.batch_key is None:
            if n:
                self.batches.setdefault(None, 0)
            return np.zeros(n, dtype=np.int64)
        self._check_not_null(table, self.batch_key, path, start, "--batch-key needs a value in every row")
        codes, values = _encode(table[self.batch_key])
        ids = np.array([self.batches.setdefault(v, len(self.batches)) for v in values], dtype=np.int64)
        return ids[codes] if n else np.zeros(0, dtype=np.int64)

    def group_ids(self, table: pa.Table, batch_ids: np.ndarray, path: str, start: int, key: str = "uid") -> np.ndarray:
        """Dense id ``(B,) int64`` of each row's ``(batch, key)`` group, new groups numbered by first appearance;
        ``key`` is ``uid`` or ``prompts`` (rows with equal prompt token ids, keyed by ``prompt_keys``)."""
        column = table[key]
        if key == "prompts" and (pa.types.is_list(column.type) or pa.types.is_large_list(column.type)):
            if column.null_count:
                bad = int(np.flatnonzero(column.is_null().to_numpy(zero_copy_only=False))[0])
                raise InputError(path, "is null; rows are grouped by their prompt token ids", row=start + bad,
                                 column=key)
            return self._pair_ids(batch_ids, pa.chunked_array([prompt_keys(column)]), self.groups)
        self._check_not_null(table, key, path, start, "every row needs a group id")
        return self._pair_ids(batch_ids, table[key], self.groups)

    def _pair_ids(self, parent: np.ndarray, column: pa.ChunkedArray, ids: dict) -> np.ndarray:
        """Dense ids of ``(parent id, value of column)`` pairs, registered in ``ids`` by first appearance."""
        if len(parent) == 0:
            return np.zeros(0, dtype=np.int64)
        codes, values = _encode(column)
        width = max(len(values), 1)
        uniq, position = self._first_appearance(parent * width + codes)
        dense = np.array([ids.setdefault((int(p // width), values[int(p % width)]), len(ids)) for p in uniq],
                         dtype=np.int64)
        return dense[position]

    def absorb(self, other: "Labels") -> dict[str, np.ndarray]:
        """Register the labels ``other`` numbered (one shard's, from 0) after this one's, by first appearance,
        and return the arrays that renumber ``other``'s ids into this one's: ``batch``, ``group``, ``session``.
        Absorbing the shards in dataset order numbers every label as one pass over the dataset would."""
        batch = [self.batches.setdefault(v, len(self.batches)) for v in other.batches]
        group = [self.groups.setdefault(key, len(self.groups)) for key in other.groups]
        session = [self.sessions.setdefault((group[g], s), len(self.sessions)) for g, s in other.sessions]
        return {name: np.array(ids, dtype=np.int64) for name, ids in
                (("batch", batch), ("group", group), ("session", session))}

    def batch_name(self, batch_id: int) -> str | None:
        for value, i in self.batches.items():
            if i == batch_id:
                return None if value is None else f"{self.batch_key}={value}"
        raise KeyError(batch_id)

    def batch_order(self) -> list[int]:
        """Batch ids in ascending order of their key values (the order training steps ran in)."""
        return [i for _, i in sorted(self.batches.items(), key=lambda kv: (kv[0] is None, kv[0]))]

    def batch_values(self) -> list:
        """The batch key's values in ``batch_order``, as the data holds them (``100``, not ``step=100``)."""
        names = {i: value for value, i in self.batches.items()}
        return [names[i] for i in self.batch_order()]

    def step_ranks(self) -> tuple[np.ndarray, list[str]]:
        """Each batch id's rank in ``batch_order`` ``(n_batches,)`` and the batches' names in that order: the
        steps of a run as the verdict lists them."""
        order = self.batch_order()
        rank = np.empty(len(order), dtype=np.int64)
        rank[order] = np.arange(len(order))
        return rank, [f"{self.batch_key}={value}" for value in self.batch_values()]

    def uids_of_batch(self, batch_id: int) -> list:
        return [uid for (b, uid) in self.groups if b == batch_id]

    @property
    def group_count(self) -> int:
        """Number of groups (after ``merge_as_verl_index`` several uids may share one)."""
        return len(set(self.groups.values()))

    def merge_as_verl_index(self) -> np.ndarray:
        """Merge the groups of each batch whose uids verl's ``grpo_vectorized`` merges (``verl_index_keys``);
        returns each old group id's new id ``(G,) int64``, still numbered by first appearance."""
        by_batch: dict[int, list[tuple[int, object]]] = defaultdict(list)
        for (b, uid), g in self.groups.items():
            by_batch[b].append((g, uid))
        key_of = {}
        for b, items in by_batch.items():
            for (g, _), key in zip(items, verl_index_keys([uid for _, uid in items])):
                key_of[g] = (b, key)
        new: dict[tuple, int] = {}
        renumber = np.array([new.setdefault(key_of[g], len(new)) for g in range(len(self.groups))], dtype=np.int64)
        self.groups = {pair: int(renumber[g]) for pair, g in self.groups.items()}
        return renumber

    def session_ids(self, table: pa.Table, group_ids: np.ndarray, path: str, start: int) -> np.ndarray:
        """Dense id ``(B,) int64`` of each row's agent session ``(batch, uid, session_id)``."""
        self._check_not_null(table, "session_id", path, start, "every output needs its session")
        return self._pair_ids(group_ids, table["session_id"], self.sessions)

    def session_key_collisions(self, sessions) -> list[list[tuple[int, object]]]:
        """The ``(group id, session_id)`` pairs of ``sessions`` that share verl's string key
        ``f"{uid}_{session_id}"`` within a batch, one list per shared key (verl 0.9.1's V1 trainer folds each
        list into one session; rladv keeps the pairs apart)."""
        batch_uid = {g: key for key, g in self.groups.items()}
        by_key: dict[tuple, list] = defaultdict(list)
        for g, session in sessions:
            batch, uid = batch_uid[g]
            by_key[batch, f"{uid}_{session}"].append((g, session))
        return [pairs for pairs in by_key.values() if len(pairs) > 1]

    def colliding_sessions(self) -> np.ndarray:
        """Ids ``(K,) int64`` of the sessions in a ``session_key_collisions`` list."""
        return np.array([self.sessions[pair] for pairs in self.session_key_collisions(self.sessions)
                         for pair in pairs], dtype=np.int64)


def verl_index_keys(uids: list) -> list:
    """The group key verl's ``as_torch_index`` (``grpo_vectorized``) gives each uid of one batch.

    verl's uids are an object array, which it converts with ``int()`` when every uid of the batch converts to
    an int64: then ``"01"``, ``" 1"`` and ``"+1"`` are all 1. Otherwise every uid is its own key.
    """
    try:
        return np.array(uids, dtype=object).astype(np.int64).tolist()
    except (ValueError, OverflowError, TypeError):
        return list(uids)


def uid_merges(uids: list) -> list[tuple]:
    """Sets of distinct uids of one batch that verl's ``as_torch_index`` merges into one group."""
    merged: dict[object, list] = defaultdict(list)
    for uid, key in zip(uids, verl_index_keys(uids)):
        merged[key].append(uid)
    return [tuple(v) for v in merged.values() if len(v) > 1]
