"""Seals: a signed manifest of a closed recording, and the check of one.

When a run closes, its writer seals the folder: ``manifest.json`` holds the
digest (BLAKE3; SHA-256 in version 1 manifests) and size of every recorded file, a hash chain over each JSONL file's
lines, and an Ed25519 signature over all of it (``evalkit.store.signing``).
The harness seals each mission folder it captured and then the whole output
folder, whose manifest lists every mission's manifest and stream: one
signature vouches for thousands of runs, so ``score`` checks a stream by one
hash against an already-checked list rather than one signature per run.

The signature covers the manifest file's own bytes up to the signature's
value (that field is written last, and nothing may follow it but the
closing brace): no canonical form to compute, which at a folder listing ten
thousand runs was most of a second.

A check gives one of three words. **verified**: a trusted manifest lists the
file with these bytes. **unsigned**: no manifest lists it (a foreign stream,
or a run whose writer was killed before it closed) — still scored.
**tampered**: a manifest lists it and the bytes differ, a listed file is
gone, or the manifest itself is altered or signed by a key not trusted here
— scored as an infrastructure failure, never as the run it claims to be.

Removing every seal leaves an unsigned run, which nothing here can tell from
a foreign one; ``--require-signed`` (and ``run``/``measure``, which score
what they have just sealed) count unsigned as tampered.

The chain names the first line that differs: line *i*'s link is the digest
of link *i-1* and the line's bytes (newline included), kept to 64 bits — the
whole file's digest is what proves it whole; the chain only says where.
"""

from __future__ import annotations

import hashlib
import json
import os
import stat
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import orjson
from blake3 import blake3

from evalkit.errors import EvalkitError
from evalkit.store import layout
from evalkit.store.replace import replace_file
from evalkit.store.signing import Signer, Trust, signature_problem

FORMAT, VERSION = "evalkit-manifest", 2


@dataclass(frozen=True)
class Digest:
    """The hash a manifest version names its files by (``name``: its entries' key)."""

    name: str
    raw: Callable[[bytes], bytes]

    def hex(self, data: bytes | memoryview) -> str:
        return self.raw(data).hex()


#: Each manifest version's digest. Version 2 hashes with BLAKE3, which takes half
#: SHA-256's time on a stream (even with the CPU's SHA extensions): hashing every
#: scored byte is most of what checking seals adds to scoring. Version 1 is still read.
DIGESTS = {1: Digest("sha256", lambda data: hashlib.sha256(data).digest()),
           2: Digest("blake3", lambda data: blake3(data).digest())}
CURRENT = DIGESTS[VERSION]
VERIFIED, UNSIGNED, TAMPERED = "verified", "unsigned", "tampered"
#: The words a check gives, in the order a summary lists them.
WORDS = (VERIFIED, UNSIGNED, TAMPERED)
#: The reason a tampered run's verdict carries, before what was found.
ALTERED = "recording altered after it was closed"

#: Folders of a mission that are not its recording: the agent's working copy, and
#: approval requests a person decides later (their changes are not tampering).
NOT_RECORDED = frozenset({"work", "approvals"})
#: Files a run's readers open: one appearing in a sealed folder after it closed is
#: an addition, not an unlisted leftover.
READ_NAMES = frozenset({layout.EVENTS_FILE, layout.META_FILE, layout.MODEL_FILE,
                        layout.TOOLS_FILE, "command.json"})
_LINK_HEX = 16
_ZERO = bytes(32)


# -- writing ---------------------------------------------------------------------------------


def chain(data: bytes, digest: Digest = CURRENT) -> list[str]:
    """The chain links of ``data``'s lines (a last line without a newline counts)."""
    links, link = [], _ZERO
    for line in _lines(data):
        link = digest.raw(link + line)
        links.append(link.hex()[:_LINK_HEX])
    return links


def _lines(data: bytes) -> Iterator[bytes]:
    start = 0
    while start < len(data):
        end = data.find(b"\n", start)
        end = len(data) if end < 0 else end + 1
        yield data[start:end]
        start = end


def entry_of(data: bytes, *, chained: bool) -> dict[str, Any]:
    """What a manifest says of one file's bytes."""
    entry: dict[str, Any] = {CURRENT.name: CURRENT.hex(data), "bytes": len(data)}
    if chained:
        entry["chain"] = chain(data, CURRENT)
    return entry


def _read(path: Path) -> bytes:
    with open(path, "rb") as handle:
        return handle.read()


def _read_if_there(path: str) -> bytes | None:
    """A regular file's bytes, or None when there is none to read. Asked of every folder a
    stream sits in, most of which hold no seal, so the miss is one system call."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC | os.O_NONBLOCK)
    except OSError:
        return None
    try:
        if not stat.S_ISREG(os.fstat(fd).st_mode):
            return None
        with open(fd, "rb", closefd=False) as handle:
            return handle.read()
    except OSError:
        return None
    finally:
        os.close(fd)


def write_manifest(folder: Path, files: Mapping[str, dict[str, Any]], signer: Signer, *,
                   kind: str, fsync: bool = True) -> dict[str, Any]:
    """Sign and write ``folder/manifest.json`` listing ``files`` (relative POSIX paths)."""
    manifest = {"format": FORMAT, "version": VERSION, "kind": kind,
                "files": dict(sorted(files.items())), "key_id": signer.key_id,
                "public_key": signer.public, "signature": ""}
    # A folder seal lists thousands of files: written compact, it reads a third faster.
    folder_seal = kind == "folder"
    text = json.dumps(manifest, ensure_ascii=False,
                      **({"separators": (",", ":")} if folder_seal else {"indent": 1}))
    data = text.encode("utf-8") + b"\n"
    tail = _TAILS[folder_seal]
    signed = data[:-len(tail)]  # everything up to the signature's opening quote
    manifest["signature"] = signer.sign(signed)
    data = signed + manifest["signature"].encode("ascii") + tail
    replace_file(folder / layout.MANIFEST_FILE, data, fsync=fsync)
    return manifest


def seal_run(run_dir: Path, signer: Signer, *, fsync: bool = True) -> dict[str, Any]:
    """Seal a run directory of the store: its stream, meta and call logs."""
    files = {}
    for name in (layout.EVENTS_FILE, layout.META_FILE, layout.MODEL_FILE, layout.TOOLS_FILE,
                 layout.CERTIFICATES_FILE):
        path = run_dir / name
        if path.is_file():
            files[name] = entry_of(_read(path), chained=name.endswith(".jsonl"))
    return write_manifest(run_dir, files, signer, kind="run", fsync=fsync)


def recorded_files(folder: Path) -> list[str]:
    """Every file of a mission folder that is part of its recording, relative, sorted:
    not its working copy or approvals, locks, hidden temporaries, the manifest, or a
    judge's judgments (added after the run closed, and sealed apart)."""
    found = []
    for top, dirs, names in os.walk(folder):
        here = Path(top)
        if here == folder:  # a judge's judgments carry a seal of their own (evalkit.judge)
            dirs[:] = [d for d in dirs if d not in NOT_RECORDED and d != layout.JUDGE_DIR]
        dirs[:] = sorted(d for d in dirs if not d.startswith("."))
        for name in names:
            if name.startswith(".") or name == layout.LOCK_FILE or (
                    here == folder and name == layout.MANIFEST_FILE):
                continue
            path = here / name
            if path.is_file() and not path.is_symlink():
                found.append(path.relative_to(folder).as_posix())
    return sorted(found)


def seal_mission(folder: Path, signer: Signer) -> dict[str, Any]:
    """Seal a mission folder the harness captured: every recorded file below it."""
    files = {rel: entry_of(_read(folder / rel), chained=rel.endswith(".jsonl"))
             for rel in recorded_files(folder)}
    return write_manifest(folder, files, signer, kind="mission")


def seal_folder(folder: Path, missions: Iterable[Path], signer: Signer) -> dict[str, Any]:
    """Seal an output folder over its sealed missions: each mission's manifest, and the
    stream it holds, so one signature vouches for every stream a scorer reads there.

    A folder seal's entries are bare digests (no size, no chain: the missions'
    own seals keep those), since a scorer reads one for ten thousand runs and a bare
    string parses three times faster than an object.
    """
    files: dict[str, Any] = {}
    for mission in missions:
        path = mission / layout.MANIFEST_FILE
        try:
            data = _read(path)
        except FileNotFoundError:
            continue
        prefix = mission.relative_to(folder).as_posix()
        files[f"{prefix}/{layout.MANIFEST_FILE}"] = CURRENT.hex(data)
        stream = json.loads(data).get("files", {}).get(layout.EVENTS_FILE)
        if isinstance(stream, dict) and isinstance(stream.get(CURRENT.name), str):
            # (a mission sealed by an older evalkit keeps its stream under its own seal)
            files[f"{prefix}/{layout.EVENTS_FILE}"] = stream[CURRENT.name]
    return write_manifest(folder, files, signer, kind="folder")


def _digest(entry: Any, name: str) -> str | None:
    """The digest a manifest entry names: an object's ``name`` (its manifest's digest),
    or a folder seal's bare digest; None for anything else."""
    if isinstance(entry, str):
        return entry
    if isinstance(entry, dict):
        found = entry.get(name)
        return found if isinstance(found, str) else None
    return None


# -- checking --------------------------------------------------------------------------------


@dataclass(frozen=True)
class Check:
    """What a check found for one file or folder."""

    word: str
    problem: str | None = None
    #: The folder of the manifest that decided it.
    by: str | None = None

    @property
    def tampered(self) -> bool:
        return self.word == TAMPERED

    def reason(self) -> str:
        return f"{ALTERED}: {self.problem}"


#: The one answer most streams get, made once.
_VERIFIED = Check(VERIFIED)


@dataclass
class _Manifest:
    folder: str
    data: bytes
    body: dict[str, Any] | None
    #: Why it cannot be used (unreadable, not ours, altered, untrusted); None: sound.
    problem: str | None = None
    checked: bool = False
    digest: Digest = CURRENT

    @property
    def files(self) -> dict[str, Any]:
        files = (self.body or {}).get("files")
        return files if isinstance(files, dict) else {}

    @property
    def name(self) -> str:
        return f"{layout.MANIFEST_FILE} of {os.path.basename(self.folder) or self.folder}"


@dataclass
class Checker:
    """Checks streams and folders against the seals above them, remembering every manifest
    it read and judged: ten thousand streams under one sealed folder cost one signature.
    Paths are handled as strings: a scorer asks once per stream."""

    trust: Trust
    #: Count an unsigned stream as tampered: for folders known to have been sealed whole
    #: (``run`` and ``measure`` score what they sealed moments before).
    require_signed: bool = False
    _manifests: dict[str, _Manifest | None] = field(default_factory=dict)
    #: The folder whose seal answered last, when no folder above it holds one: the
    #: streams after it are usually below it too, and are looked up there first.
    _last: tuple[str, _Manifest, dict[str, Any]] | None = None
    #: A folder (ending with ``/``) that, with every folder above it, holds no seal.
    _clear: str | None = None
    #: The working directory when the checker was made, for the relative paths it is given.
    _cwd: str = field(default_factory=os.getcwd)

    @classmethod
    def for_scoring(cls, beside: Iterable[Path] = (), trust_files: Iterable[Path] = (), *,
                    require_signed: bool = False) -> Checker:
        """A checker trusting what ``Trust.local`` trusts for recordings under ``beside``."""
        return cls(Trust.local(extra=trust_files, beside=beside), require_signed)

    # -- one stream, as a scorer reads it --------------------------------------------------

    def altered(self, path: Path, data: bytes) -> str | None:
        """The reason a scorer gives a stream that fails its seal; None when it may be scored."""
        check = self.stream(path, data)
        if check is _VERIFIED:
            return None
        if check.tampered:
            return check.reason()
        if check.word == UNSIGNED and self.require_signed:
            folder, name = os.path.split(os.path.abspath(path))
            return (f"{ALTERED}: no seal lists {name} in {os.path.basename(folder)}, "
                    "where one was written when it closed")
        return None

    @property
    def wants_listings(self) -> bool:
        """Whether ``listed`` can save a look: not under a folder seal, which answers alone."""
        return self._clear is not None

    def listed(self, folder: str, names: list[str]) -> None:
        """A folder's names, as someone else listed them: a folder holding no manifest is
        known to hold no seal without a second look (``layout.resolve_events`` tells)."""
        if layout.MANIFEST_FILE not in names:
            self._manifests.setdefault(_absolute(folder, self._cwd), None)

    def warm(self, folder: Path | str) -> None:
        """Read and judge the seals of ``folder`` and above now (before a fan-out forks,
        so its workers share them rather than each reading them again)."""
        text = os.path.abspath(folder)
        clear = True
        for above in [*_folders_above(text), text]:
            found = self._manifest(above)
            if found is not None:
                clear = False
                self._judge(found)
        if clear:  # no seal there or above: a stream below is looked for below it only
            self._clear = text.rstrip("/") + "/"

    def stream(self, path: Path | str, data: bytes) -> Check:
        """Whether the events file at ``path``, whose bytes are ``data``, is as sealed."""
        text = _absolute(os.fspath(path), self._cwd)
        last = self._last
        if last is not None and text.startswith(last[0]):
            digest = _digest(last[2].get(text[len(last[0]):]), last[1].digest.name)
            if digest is not None:
                return self._decide(text, last[0][:-1], last[1], digest, data)
        clear = self._clear
        folders = _folders_below(text, clear) if clear is not None and text.startswith(clear) \
            else _folders_above(text)
        for folder in folders:  # outermost first: one seal answers for all below
            found = self._manifest(folder)
            if found is None:
                continue
            digest = _digest(found.files.get(_rel(text, folder)), found.digest.name)
            if digest is None:
                continue
            if all(self._manifests.get(f) is None for f in _folders_above(folder)):
                self._last = (folder.rstrip("/") + "/", found, found.files)
            return self._decide(text, folder, found, digest, data)
        return Check(UNSIGNED)

    def _decide(self, path: str, folder: str, found: _Manifest, digest: str,
                data: bytes) -> Check:
        if found.problem is not None or not found.checked:
            problem = self._judge(found)
            if problem is not None:
                return Check(TAMPERED, problem, folder)
        if digest == found.digest.hex(data):
            return _VERIFIED
        return Check(TAMPERED, self._where(path, _rel(path, folder), data), folder)

    def _where(self, path: str, rel: str, data: bytes) -> str:
        """Which line of a file that differs from its seal differs (named as ``rel``), from
        the nearest manifest that keeps a chain for it."""
        for folder in reversed(_folders_above(path)):
            found = self._manifest(folder)
            if found is None:
                continue
            entry = found.files.get(_rel(path, folder))
            if isinstance(entry, dict) and isinstance(entry.get("chain"), list):
                return differs(rel, data, entry, found.digest)
        return f"{rel} differs from what was recorded"

    # -- a whole folder, as `evalkit verify` reads it -----------------------------------------

    def folder(self, folder: Path | str) -> tuple[Check, list[str]]:
        """The check of one sealed folder (every file it lists), and what is wrong in it."""
        folder = os.path.abspath(folder)
        found = self._manifest(folder)
        if found is None:
            return Check(UNSIGNED), []
        problem = self._judge(found)
        if problem is not None:
            return Check(TAMPERED, problem, folder), [problem]
        problems = []
        for rel, entry in found.files.items():
            target = os.path.join(folder, rel)
            try:
                data = _read(Path(target))
            except FileNotFoundError:
                problems.append(f"{rel} was removed")
                continue
            except OSError as exc:
                problems.append(f"{rel} cannot be read: {exc.strerror or exc}")
                continue
            if found.digest.hex(data) != _digest(entry, found.digest.name):
                problems.append(differs(rel, data, entry, found.digest)
                                if isinstance(entry, dict) and
                                "chain" in entry else self._where(target, rel, data))
        if (found.body or {}).get("kind") in ("run", "mission"):
            for name in sorted(READ_NAMES - set(found.files)):
                if os.path.isfile(os.path.join(folder, name)):
                    problems.append(f"{name} was added after the recording was closed")
        if problems:
            return Check(TAMPERED, problems[0], folder), problems
        return Check(VERIFIED, None, folder), []

    def manifest_of(self, folder: Path | str) -> dict[str, Any] | None:
        """The body of the evalkit manifest in ``folder``, as read (None: there is none)."""
        found = self._manifest(os.path.abspath(folder))
        return None if found is None else (found.body or {})

    def signer_of(self, folder: Path | str) -> tuple[str | None, str | None]:
        """(key id, where its trust came from) of the manifest in ``folder``."""
        body = self.manifest_of(folder)
        key = body.get("key_id") if body is not None else None
        return key, self.trust.where(key)

    # -- manifests ---------------------------------------------------------------------------

    def _manifest(self, folder: str) -> _Manifest | None:
        try:
            return self._manifests[folder]
        except KeyError:
            pass
        found: _Manifest | None = None
        data = _read_if_there(f"{folder.rstrip('/')}/{layout.MANIFEST_FILE}")
        if data is not None:
            found = _parse(folder, data)
        self._manifests[folder] = found
        return found

    def _judge(self, found: _Manifest) -> str | None:
        """Why a manifest cannot vouch for anything (None: it can), decided once."""
        if found.checked:
            return found.problem
        found.checked = True
        if found.problem is None:
            found.problem = self._signature(found)
        return found.problem

    def _signature(self, found: _Manifest) -> str | None:
        body = found.body or {}
        key, signature = body.get("key_id"), body.get("signature")
        payload = signed_bytes(found.data)
        if payload is None:
            return f"{found.name} carries no signature"
        problem = self.trust.check(key, payload, signature)
        if problem is None:
            return None
        # Not signed by a key trusted here: still sound if an outer seal vouches for
        # these very bytes (a mission folder copied with the output folder around it).
        if self._vouched(found):
            return None
        if key in self.trust.keys or not isinstance(body.get("public_key"), str):
            return f"{found.name}: {problem}"
        own = signature_problem(_raw(body.get("public_key")), payload, signature)
        if own is not None:
            return f"{found.name}: {own}"
        return (f"{found.name} is signed by key {key}, which is not trusted here "
                "(give its public key with --trust)")

    def _vouched(self, found: _Manifest) -> bool:
        mine = os.path.join(found.folder, layout.MANIFEST_FILE)
        for outer in reversed(_folders_above(mine)[:-1]):
            above = self._manifest(outer)
            if above is None:
                continue
            digest = _digest(above.files.get(_rel(mine, outer)), above.digest.name)
            if digest is not None and self._judge(above) is None:
                return digest == above.digest.hex(found.data)
        return False


def _absolute(path: str, cwd: str) -> str:
    """``os.path.abspath(path)`` at a fifth of its cost for the paths a scorer hands over:
    one with nothing ``abspath`` would change (``.``, ``..``, doubled or trailing slashes)
    is taken as it is, or joined to ``cwd`` when relative."""
    if "/." in path or "//" in path or path.endswith("/") or path.startswith("."):
        return os.path.abspath(path)
    if path.startswith("/"):
        return path
    return f"{cwd}/{path}" if cwd != "/" else f"/{path}"


def _folders_above(path: str) -> list[str]:
    """Every folder that holds ``path`` (absolute), outermost first."""
    out = []
    end = path.rfind("/")
    while end > 0:
        out.append(path[:end])
        end = path.rfind("/", 0, end)
    out.append("/")
    out.reverse()
    return out


def _folders_below(path: str, clear: str) -> list[str]:
    """The folders that hold ``path`` below ``clear`` (which ends with ``/``), outermost
    first: where a seal may be when ``clear`` and every folder above it hold none."""
    out = []
    at = path.find("/", len(clear))
    while at > 0:
        out.append(path[:at])
        at = path.find("/", at + 1)
    return out


def _rel(path: str, folder: str) -> str:
    return path[len(folder):].lstrip("/") if folder != "/" else path[1:]


def _raw(text: Any) -> bytes:
    import base64

    try:
        return base64.b64decode(text, validate=True)
    except (ValueError, TypeError):
        return b""


#: How a manifest ends: its signature field last, then one of these (indented, compact).
#: What is signed is every byte before the signature's value (nothing to canonicalise:
#: the writer's bytes are signed), and after the value comes exactly a tail: nothing can
#: follow the signature unsigned.
_TAILS = {False: b'"\n}\n', True: b'"}\n'}
_FIELDS = (b'"signature": "', b'"signature":"')


def signed_bytes(data: bytes) -> memoryview | None:
    """The bytes a manifest's signature covers, or None when the file does not end the way
    the writer ends it: ``"signature": "`` and the value, then a tail."""
    tail = next((t for t in _TAILS.values() if data.endswith(t)), None)
    if tail is None:
        return None
    start = data.rfind(b'"', 0, len(data) - len(tail)) + 1
    if start <= 0 or not data[:start].endswith(_FIELDS):
        return None
    return memoryview(data)[:start]


def _parse(folder: str, data: bytes) -> _Manifest | None:
    """A manifest as read; None when the file is some other program's ``manifest.json``."""
    name = f"{layout.MANIFEST_FILE} of {os.path.basename(folder) or folder}"
    try:
        body = orjson.loads(data)
    except orjson.JSONDecodeError:
        body = None
    if not isinstance(body, dict) or body.get("format") != FORMAT:
        if b'"evalkit-manifest"' in data:  # ours, and damaged
            return _Manifest(folder, data, None, f"{name} is not a readable manifest")
        return None
    digest = DIGESTS.get(body.get("version"))  # type: ignore[arg-type]
    if digest is None:
        versions = " and ".join(str(v) for v in DIGESTS)
        return _Manifest(folder, data, body, f"{name} has version {body.get('version')!r}; "
                                             f"this evalkit reads {versions}")
    return _Manifest(folder, data, body, digest=digest)


def differs(rel: str, data: bytes, entry: Mapping[str, Any], digest: Digest = CURRENT) -> str:
    """Where ``data`` first departs from the file a manifest entry (of a manifest hashing
    with ``digest``) describes."""
    links = entry.get("chain")
    if not isinstance(links, list):
        return f"{rel} differs from what was recorded"
    now = chain(data, digest)
    for i, (was, is_) in enumerate(zip(links, now, strict=False)):
        if was != is_:
            return f"{rel} line {i + 1} differs from what was recorded"
    if len(now) > len(links):
        extra = len(now) - len(links)
        noun = "line was" if extra == 1 else "lines were"
        return f"{rel}: {extra} {noun} appended after line {len(links)}, where it was closed"
    if len(now) < len(links):
        return (f"{rel} ends at line {len(now)}; line {len(now) + 1} on "
                f"({len(links) - len(now)} of {len(links)}) was removed")
    return f"{rel} differs from what was recorded"


def signer_or_none(environ: Mapping[str, str] | None = None) -> tuple[Signer | None, str | None]:
    """This machine's signer, or None and the sentence why runs will be unsigned."""
    from evalkit.store.signing import local_signer

    try:
        return local_signer(environ), None
    except EvalkitError as exc:
        return None, f"note: recordings will be unsigned: {exc.message}"


@dataclass(frozen=True)
class Finding:
    """One folder ``evalkit verify`` reports: a sealed folder, or a stream no seal lists."""

    path: Path
    word: str
    #: What its seal is (run, mission, folder), or None for an unsigned stream.
    kind: str | None
    files: int
    problems: tuple[str, ...] = ()
    key: str | None = None
    trusted_by: str | None = None


def verify_paths(paths: Iterable[Path], checker: Checker) -> list[Finding]:
    """Every sealed folder under ``paths`` checked whole, then every stream no seal lists,
    in path order. A path that is a stream or a run folder is checked with the seals
    above it too."""
    findings: list[Finding] = []
    seen: set[Path] = set()
    for given in paths:
        root = Path(os.path.abspath(given))
        if not root.exists():
            raise EvalkitError(f"cannot verify {given}: it does not exist")
        sealed, streams = _walk(root)
        for folder in sealed:
            if folder in seen:
                continue
            seen.add(folder)
            check, problems = checker.folder(folder)
            body = checker.manifest_of(folder) or {}
            listed = body.get("files")
            key, by = checker.signer_of(folder)
            findings.append(Finding(folder, check.word, body.get("kind"),
                                    len(listed) if isinstance(listed, dict) else 0,
                                    tuple(problems), key, by))
        for stream in streams:
            if stream in seen:
                continue
            seen.add(stream)
            try:
                data = _read(stream)
            except OSError as exc:
                findings.append(Finding(stream, TAMPERED, None, 1, (
                    f"{stream.name} cannot be read: {exc.strerror or exc}",)))
                continue
            check = checker.stream(stream, data)
            if check.word == UNSIGNED:
                findings.append(Finding(stream, UNSIGNED, None, 1))
            elif check.tampered and not any(str(f.path) == check.by for f in findings):
                findings.append(Finding(stream, TAMPERED, None, 1, (check.problem or "",)))
    return sorted(findings, key=lambda f: f.path)


def _walk(root: Path) -> tuple[list[Path], list[Path]]:
    """The folders holding an evalkit manifest, and the events files, under ``root`` (a
    working copy or approvals folder of a mission is not looked in)."""
    if root.is_file():
        return [], [root]
    sealed, streams = [], []
    for top, dirs, names in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in NOT_RECORDED and not d.startswith("."))
        here = Path(top)
        if layout.MANIFEST_FILE in names:
            try:
                ours = _parse(top, _read(here / layout.MANIFEST_FILE)) is not None
            except OSError:
                ours = False
            if ours:
                sealed.append(here)
        if layout.EVENTS_FILE in names:
            streams.append(here / layout.EVENTS_FILE)
    return sealed, streams


def summary(findings: Iterable[Finding]) -> dict[str, int]:
    """How many folders got each word, every word named."""
    counts = dict.fromkeys(WORDS, 0)
    for finding in findings:
        counts[finding.word] += 1
    return counts


def reseal(root: Path, signer: Signer) -> int:
    """Sign every seal under ``root`` again with ``signer``, deepest first, each listing the
    same files as before with their bytes as they are now; returns how many. For a corpus
    moving to a new key: check it against the old key first, or this launders whatever
    was altered."""
    sealed, _ = _walk(Path(os.path.abspath(root)))
    sealed.sort(key=lambda p: len(p.parts), reverse=True)
    for folder in sealed:
        found = _parse(str(folder), _read(folder / layout.MANIFEST_FILE))
        body = (found.body if found is not None else None) or {}
        files = {rel: (CURRENT.hex(_read(folder / rel))
                       if isinstance(entry, str) else
                       entry_of(_read(folder / rel), chained=isinstance(entry, dict)
                                and "chain" in entry))
                 for rel, entry in (body.get("files") or {}).items()}
        write_manifest(folder, files, signer, kind=str(body.get("kind") or "folder"))
    return len(sealed)
