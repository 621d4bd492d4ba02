"""Sealing: envelopes bound to their record, keys that rotate, keys that changed, file modes."""

from __future__ import annotations

import base64
import json
import os
import stat
from pathlib import Path

import pytest
from click.testing import CliRunner

from evalkit.gate.sealing import KeyProvider, SealError, seal, unseal

ID = {"checkpoint_id": "c1", "run_id": "r1", "definition_hash": "sha256:aa"}


@pytest.fixture
def keys(tmp_path: Path) -> KeyProvider:
    return KeyProvider(tmp_path / "keys" / "checkpoint")


def test_an_envelope_opens_for_its_record_only(keys: KeyProvider) -> None:
    envelope = seal(keys, b"state", ID)
    fields = json.loads(envelope)
    assert set(fields) == {"v", "kid", "fp", "nonce", "ct"} and fields["v"] == 1
    assert len(base64.b64decode(fields["nonce"])) == 12
    assert b"state" not in envelope
    assert unseal(keys, envelope, ID) == b"state"
    for moved in ({**ID, "checkpoint_id": "c2"}, {**ID, "run_id": "r2"},
                  {**ID, "definition_hash": "sha256:bb"}):
        with pytest.raises(SealError, match="sealed for another record or run"):
            unseal(keys, envelope, moved)


def test_two_seals_of_the_same_payload_differ(keys: KeyProvider) -> None:
    assert json.loads(seal(keys, b"x", ID))["nonce"] != json.loads(seal(keys, b"x", ID))["nonce"]


def test_an_altered_header_or_ciphertext_does_not_open(keys: KeyProvider) -> None:
    fields = json.loads(seal(keys, b"state", ID))
    ct = bytearray(base64.b64decode(fields["ct"]))
    ct[0] ^= 1
    flipped = {**fields, "ct": base64.b64encode(bytes(ct)).decode()}
    with pytest.raises(SealError, match="altered"):
        unseal(keys, json.dumps(flipped).encode(), ID)
    with pytest.raises(SealError, match="not envelope version 1"):
        unseal(keys, json.dumps({**fields, "v": 2}).encode(), ID)
    with pytest.raises(SealError, match="not one evalkit makes"):
        unseal(keys, json.dumps({**fields, "kid": "../../evalkit"}).encode(), ID)
    with pytest.raises(SealError, match="not one evalkit makes"):
        unseal(keys, json.dumps({**fields, "kid": fields["kid"] + "\n"}).encode(), ID)
    with pytest.raises(SealError, match="not one evalkit wrote"):
        unseal(keys, b"not json", ID)


def test_rotation_keeps_old_envelopes_open_and_seals_new_ones_with_the_new_key(
        keys: KeyProvider) -> None:
    old = seal(keys, b"before", ID)
    old_kid = json.loads(old)["kid"]
    new_kid = keys.rotate()
    assert new_kid != old_kid
    new = seal(keys, b"after", ID)
    assert json.loads(new)["kid"] == new_kid
    assert unseal(keys, old, ID) == b"before"
    assert unseal(keys, new, ID) == b"after"
    listed = keys.list()
    assert [k.kid for k in listed] == [old_kid, new_kid]
    assert [k.active for k in listed] == [False, True]


def test_an_unknown_key_is_named_in_one_sentence(keys: KeyProvider, tmp_path: Path) -> None:
    envelope = seal(keys, b"state", ID)
    kid = json.loads(envelope)["kid"]
    (keys.folder / f"{kid}.key").unlink()
    with pytest.raises(SealError) as caught:
        unseal(keys, envelope, ID)
    assert caught.value.message == (f"checkpoint key {kid} is not in {keys.folder}: it was "
                                    "removed, or the checkpoint was sealed on another machine")


def test_changed_key_material_is_named_not_reported_as_tampering(keys: KeyProvider) -> None:
    envelope = seal(keys, b"state", ID)
    kid = json.loads(envelope)["kid"]
    path = keys.folder / f"{kid}.key"
    record = json.loads(path.read_text())
    record["key"] = base64.b64encode(os.urandom(32)).decode()
    path.write_text(json.dumps(record))
    with pytest.raises(SealError) as caught:
        unseal(keys, envelope, ID)
    assert caught.value.message == (f"checkpoint key {kid} has changed since checkpoint c1 was "
                                    "sealed (its key material was replaced), so it cannot be "
                                    "opened")


def test_key_files_are_private(keys: KeyProvider) -> None:
    kid = keys.rotate()
    assert stat.S_IMODE(keys.folder.parent.stat().st_mode) == 0o700  # keys/, made here
    assert stat.S_IMODE(keys.folder.stat().st_mode) == 0o700
    assert stat.S_IMODE((keys.folder / f"{kid}.key").stat().st_mode) == 0o600
    assert stat.S_IMODE((keys.folder / "ACTIVE").stat().st_mode) == 0o600


def test_first_use_from_many_threads_makes_one_key(keys: KeyProvider) -> None:
    import threading

    barrier = threading.Barrier(8)
    kids: list[str] = []

    def first() -> None:
        barrier.wait()
        kids.append(keys.active()[0])

    threads = [threading.Thread(target=first) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(set(kids)) == 1 and len(keys.list()) == 1


def test_keys_rotate_and_list_commands(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    from evalkit.cli import main

    monkeypatch.setenv("EVALKIT_HOME", str(tmp_path / "home"))
    runner = CliRunner()
    empty = runner.invoke(main, ["keys", "list"])
    assert empty.exit_code == 0 and "no checkpoint keys" in empty.output
    first = runner.invoke(main, ["keys", "rotate"])
    second = runner.invoke(main, ["keys", "rotate"])
    assert first.exit_code == second.exit_code == 0
    kid1, kid2 = first.output.strip(), second.output.strip()
    assert kid1 != kid2
    listed = runner.invoke(main, ["keys", "list", "--json"])
    rows = [json.loads(line) for line in listed.output.splitlines()]
    assert [(r["kid"], r["active"]) for r in rows] == [(kid1, False), (kid2, True)]
    folder = tmp_path / "home" / "keys" / "checkpoint"
    for kid in (kid1, kid2):
        material = json.loads((folder / f"{kid}.key").read_text())["key"]
        assert material not in listed.output
    text = runner.invoke(main, ["keys", "list"])
    assert f"{kid2}  " in text.output and "active" in text.output and material not in text.output


def test_a_state_folder_that_cannot_hold_keys_is_one_sentence(tmp_path: Path) -> None:
    from evalkit.cli import main

    (tmp_path / "file").write_text("")
    result = CliRunner().invoke(main, ["keys", "rotate"],
                                env={"EVALKIT_HOME": str(tmp_path / "file")})
    assert result.exit_code == 2
    assert result.output.startswith("Error: cannot create the checkpoint keys in ")
    assert "Traceback" not in result.output
