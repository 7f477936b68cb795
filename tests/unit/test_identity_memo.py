"""The identity memo answers for the very object it was given, with a proof still equal to the caller's."""

from __future__ import annotations

from om_core.domain.identity_memo import IdentityMemo


def test_a_value_answers_for_its_own_object_and_an_equal_proof_only() -> None:
    memo: IdentityMemo[str] = IdentityMemo(8)
    key, twin = {"a": 1}, {"a": 1}
    memo.put(key, 3, "three")
    assert memo.get(key, 3) == "three"
    assert memo.get(key, 4) is None, "the proof changed: the value is for another size"
    assert memo.get(twin, 3) is None, "an equal object is not the one the value was filed for"


def test_a_full_memo_starts_again() -> None:
    memo: IdentityMemo[int] = IdentityMemo(2)
    keys = [object(), object(), object()]
    for i, key in enumerate(keys):
        memo.put(key, None, i)
    assert memo.get(keys[2], None) == 2
    assert memo.get(keys[0], None) is None and memo.get(keys[1], None) is None
