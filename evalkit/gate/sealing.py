"""Sealing checkpoint payloads: AES-256-GCM data keys that rotate, kept in the state folder.

A paused mission's state can hold what the model saw and what the tools returned,
so a checkpoint is stored sealed. The data keys live beside the signing key
(``keys/checkpoint/<kid>.key``, mode 0600, folder 0700; ``ACTIVE`` names the key
new seals use). Rotating makes a new active key and keeps the old ones, so a
checkpoint sealed before the rotation still opens.

The envelope is canonical JSON ``{"v": 1, "kid", "fp", "nonce", "ct"}``: ``fp``
is a fingerprint of the key it was sealed with, so a key file replaced under the
same id is named as such instead of surfacing as a bare tag failure. The
associated data is RFC 8785 canonical JSON of the record's identity (checkpoint
id, run id, definition hash) and the envelope header (v, kid, fp): a ciphertext
moved to another record, another run, or given another header does not open.
"""

from __future__ import annotations

import base64
import binascii
import contextlib
import fcntl
import hashlib
import hmac
import json
import os
import re
import secrets
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Any

from evalkit.errors import EvalkitError
from evalkit.store.signing import write_file
from evalkit.store.state import KEYS, state_home

#: The envelope format this module writes and the only one it opens.
VERSION = 1
#: The folder of the data keys, under the state folder's ``keys/``.
FOLDER = "checkpoint"
ACTIVE_FILE = "ACTIVE"
KEY_BYTES = 32
NONCE_BYTES = 12
#: A key id is a file name: nothing that could climb out of the folder.
_KID = re.compile(r"^[a-z0-9][a-z0-9-]{0,63}$")
_FP_LABEL = b"evalkit checkpoint key fingerprint v1"


class SealError(EvalkitError):
    """A sealed payload that cannot be opened, said in one sentence (which key, why)."""


@dataclass(frozen=True)
class KeyInfo:
    """What ``evalkit keys list`` shows of a key: never its material."""

    kid: str
    created: str
    active: bool
    fingerprint: str


def fingerprint(key: bytes) -> str:
    """A short public name for key material: an HMAC of a fixed label under the key.

    Revealing it tells nothing about the key; a different key gives a different one.
    """
    return hmac.new(key, _FP_LABEL, hashlib.sha256).hexdigest()[:16]


def default_folder(environ: Mapping[str, str] | None = None) -> Path:
    return state_home(environ) / KEYS / FOLDER


class KeyProvider:
    """The data keys in one folder: an active one for sealing, every one for opening."""

    def __init__(self, folder: Path | str) -> None:
        self.folder = Path(folder)

    @classmethod
    def default(cls, environ: Mapping[str, str] | None = None) -> KeyProvider:
        """The state folder's keys (``$EVALKIT_HOME/keys/checkpoint``)."""
        return cls(default_folder(environ))

    def active(self) -> tuple[str, bytes]:
        """The key new seals use, made on first use."""
        kid = self._read_active()
        if kid is None:
            with self._locked():
                kid = self._read_active() or self._make_active()
        return kid, self.resolve(kid)

    def rotate(self) -> str:
        """A new active key; the old ones stay, for what they sealed."""
        with self._locked():
            return self._make_active()

    def resolve(self, kid: str) -> bytes:
        """The material of key ``kid``, or one sentence saying why there is none."""
        if not isinstance(kid, str) or not _KID.fullmatch(kid):
            raise SealError(f"the checkpoint key id {kid!r} is not one evalkit makes; "
                            "the envelope was altered")
        path = self.folder / f"{kid}.key"
        try:
            record = json.loads(path.read_text(encoding="ascii"))
            key = base64.b64decode(record["key"], validate=True)
        except FileNotFoundError:
            raise SealError(f"checkpoint key {kid} is not in {self.folder}: it was removed, "
                            "or the checkpoint was sealed on another machine") from None
        except (OSError, ValueError, KeyError, TypeError, binascii.Error):
            raise SealError(f"checkpoint key file {path} is unreadable") from None
        if len(key) != KEY_BYTES:
            raise SealError(f"checkpoint key file {path} does not hold a 256-bit key")
        return key

    def list(self) -> list[KeyInfo]:
        """Every key, oldest first."""
        active = self._read_active()
        found = []
        for path in self.folder.glob("*.key") if self.folder.is_dir() else []:
            kid = path.stem
            if not _KID.fullmatch(kid):
                continue
            try:
                record = json.loads(path.read_text(encoding="ascii"))
                fp = fingerprint(self.resolve(kid))
            except (OSError, ValueError, SealError):
                record, fp = {}, "unreadable"
            found.append(KeyInfo(kid, str(record.get("created", "?")), kid == active, fp))
        return sorted(found, key=lambda k: (k.created, k.kid))

    def _read_active(self) -> str | None:
        try:
            kid = (self.folder / ACTIVE_FILE).read_text(encoding="ascii").strip()
        except FileNotFoundError:
            return None
        except OSError as exc:
            raise SealError(f"cannot read {self.folder / ACTIVE_FILE}: "
                            f"{exc.strerror or exc}") from None
        return kid or None

    def _make_active(self) -> str:
        now = datetime.now(timezone.utc)
        kid = now.strftime("k%Y%m%d%H%M%S") + "-" + secrets.token_hex(4)
        record = {"kid": kid, "created": now.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
                  "key": base64.b64encode(secrets.token_bytes(KEY_BYTES)).decode("ascii")}
        if not write_file(self.folder / f"{kid}.key", json.dumps(record).encode("ascii"), 0o600,
                          replace=False):
            raise FileExistsError(self.folder / f"{kid}.key")  # a key id is never reused
        write_file(self.folder / ACTIVE_FILE, kid.encode("ascii"), 0o600, replace=True)
        return kid

    @contextlib.contextmanager
    def _locked(self) -> Iterator[None]:
        """One maker of keys at a time, across processes (two first uses agree on one key)."""
        try:
            self.folder.parent.mkdir(parents=True, exist_ok=True, mode=0o700)  # keys/, if new
            self.folder.mkdir(exist_ok=True, mode=0o700)
            os.chmod(self.folder, 0o700)
            fd = os.open(self.folder / ".lock", os.O_RDWR | os.O_CREAT | os.O_CLOEXEC, 0o600)
        except OSError as exc:
            raise SealError(f"cannot create the checkpoint keys in {self.folder}: "
                            f"{exc.strerror or exc} (EVALKIT_HOME moves the state folder)"
                            ) from None
        try:
            fcntl.flock(fd, fcntl.LOCK_EX)
            yield
        finally:
            os.close(fd)


def _aad(identity: Mapping[str, str], header: Mapping[str, Any]) -> bytes:
    import rfc8785

    if not all(isinstance(v, str) for v in identity.values()):
        raise TypeError("a sealed record's identity is made of strings")
    return rfc8785.dumps({"record": dict(identity), "header": dict(header)})


def seal(keys: KeyProvider, plaintext: bytes, identity: Mapping[str, str]) -> bytes:
    """The envelope of ``plaintext`` under the active key, bound to ``identity``."""
    import rfc8785
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    kid, key = keys.active()
    header = {"v": VERSION, "kid": kid, "fp": fingerprint(key)}
    nonce = secrets.token_bytes(NONCE_BYTES)
    ct = AESGCM(key).encrypt(nonce, plaintext, _aad(identity, header))
    return rfc8785.dumps({**header, "nonce": base64.b64encode(nonce).decode("ascii"),
                          "ct": base64.b64encode(ct).decode("ascii")})


def envelope_kid(envelope: bytes) -> str | None:
    """The key id an envelope names, or None when it names none (for listings only)."""
    with contextlib.suppress(ValueError, AttributeError, UnicodeDecodeError):
        kid = json.loads(envelope).get("kid")
        return kid if isinstance(kid, str) else None
    return None


def unseal(keys: KeyProvider, envelope: bytes, identity: Mapping[str, str]) -> bytes:
    """The plaintext, when ``envelope`` was sealed for ``identity`` with a key still here."""
    from cryptography.exceptions import InvalidTag
    from cryptography.hazmat.primitives.ciphers.aead import AESGCM

    what = identity.get("checkpoint_id", "the record")
    try:
        fields = json.loads(envelope)
        header = {"v": fields["v"], "kid": fields["kid"], "fp": fields["fp"]}
        nonce = base64.b64decode(fields["nonce"], validate=True)
        ct = base64.b64decode(fields["ct"], validate=True)
    except (ValueError, KeyError, TypeError, UnicodeDecodeError, binascii.Error):
        raise SealError(f"checkpoint {what}'s envelope is not one evalkit wrote") from None
    if set(fields) != {"v", "kid", "fp", "nonce", "ct"} or header["v"] != VERSION \
            or len(nonce) != NONCE_BYTES:
        raise SealError(f"checkpoint {what}'s envelope is not envelope version {VERSION} "
                        "as evalkit writes it")
    key = keys.resolve(header["kid"])
    if not hmac.compare_digest(fingerprint(key), str(header["fp"])):
        raise SealError(f"checkpoint key {header['kid']} has changed since checkpoint {what} "
                        "was sealed (its key material was replaced), so it cannot be opened")
    try:
        return AESGCM(key).decrypt(nonce, ct, _aad(identity, header))
    except InvalidTag:
        raise SealError(f"checkpoint {what} does not open: its ciphertext was sealed for "
                        "another record or run, or was altered") from None
