"""An agent's stdout and stderr scrubbed a line at a time, however the pipe cuts them."""

from __future__ import annotations

import io
import os
import threading

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from evalkit.eval.outputs import Drain, Scrubbed, Verbatim
from evalkit.redact import Redactor

SECRET = "k-s3cret-123456"
PIECES = [SECRET, "sk-abcdefghijklmnop1234", "Authorization: Bearer tok12345678",
          "API_KEY=", "value", " ", "\n", "\r\n", "é", "word", "ghp_", "a" * 20, "=",
          "'", '"', "-----BEGIN RSA PRIVATE KEY-----", "MIIEowIBAAKC", "pem0body0line",
          "-----END RSA PRIVATE KEY-----", "password: ", "\\n"]


def _scrubbed(chunks: list[bytes], redactor: Redactor) -> tuple[bytes, list[bytes]]:
    """What the file holds at the end, and after each chunk."""
    file = io.BytesIO()
    sink = Scrubbed(file, redactor)
    seen = []
    for chunk in chunks:
        sink.feed(chunk)
        seen.append(file.getvalue())
    sink.close()
    return file.getvalue(), seen


def _cut(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in zip(points, points[1:], strict=False)]


@pytest.mark.slow
@settings(max_examples=300, deadline=None)
@given(st.lists(st.sampled_from(PIECES), max_size=40), st.lists(st.integers(0, 10**6)))
def test_scrubbed_a_line_at_a_time_is_what_the_whole_text_scrubbed_gives(
        pieces: list[str], cuts: list[int]) -> None:
    redactor = Redactor(extra_values=(SECRET,), environ={})
    text = "".join(pieces)
    data = text.encode()
    final, seen = _scrubbed(_cut(data, cuts), redactor)
    assert final == redactor.redact(text).encode()
    for written in seen:  # never a credential on disk, not even for a moment
        assert SECRET.encode() not in written and b"tok12345678" not in written
        assert final.startswith(written)
    if b"pem0body0line" not in final:  # a key body the whole text hides is never on disk
        assert all(b"pem0body0line" not in written for written in seen)


def test_a_key_begun_with_an_escaped_line_break_is_held_with_the_lines_after_it() -> None:
    """hypothesis found it: a BEGIN line ending in an escaped ``\\n`` and then a real one is
    still inside the block, so the next line is scrubbed with it, as the whole text is."""
    redactor = Redactor(extra_values=(SECRET,), environ={})
    text = "-----BEGIN RSA PRIVATE KEY-----\\n\nsk-abcdefghijklmnop1234"
    final, _ = _scrubbed(_cut(text.encode(), [33]), redactor)
    assert final == redactor.redact(text).encode()
    assert b"abcdefghijklmnop1234" not in final


def test_bytes_that_are_not_utf8_are_kept_as_they_came() -> None:
    data = b"\xff\xfe caf\xc3\xa9 \xe2\x82 half a character\n" + SECRET.encode() + b" \xff\n"
    final, _ = _scrubbed(_cut(data, [1, 2, 3, 17, 30]), Redactor(extra_values=(SECRET,),
                                                                  environ={}))
    assert final == b"\xff\xfe caf\xc3\xa9 \xe2\x82 half a character\n[REDACTED] \xff\n"


def test_a_secret_holding_a_line_break_is_caught_across_writes() -> None:
    pem = "-----BEGIN KEY-----\nMIIBOgIBAAJBAK\n-----END KEY-----"
    redactor = Redactor(environ={"DEPLOY_KEY": pem})
    text = f"before\n{pem}\nafter\n"
    lines = [line.encode() + b"\n" for line in text.split("\n")[:-1]]  # a write a line
    final, seen = _scrubbed(lines, redactor)
    assert final == b"before\n[REDACTED]\nafter\n"
    assert all(b"MIIBOgIBAAJBAK" not in written for written in seen)


def test_a_private_key_printed_a_line_at_a_time_is_held_until_its_block_ends() -> None:
    redactor = Redactor(environ={})
    body = ["MIIEowIBAAKCAQEA7bq9v0xLk1q", "Zz0fYk+/abcDEF0123456789=="]
    text = "\n".join(["cat id_rsa", "-----BEGIN RSA PRIVATE KEY-----", *body,
                      "-----END RSA PRIVATE KEY-----", "done", ""])
    lines = [line.encode() + b"\n" for line in text.split("\n")[:-1]]
    final, seen = _scrubbed(lines, redactor)
    assert final == (b"cat id_rsa\n-----BEGIN RSA PRIVATE KEY-----\n[REDACTED]\n"
                     b"-----END RSA PRIVATE KEY-----\ndone\n")
    assert seen[0] == b"cat id_rsa\n"  # what came before the block was not held
    assert not any(part.encode() in written for written in seen for part in body)


def test_a_block_that_never_ends_is_written_at_the_end_without_its_body() -> None:
    lines = [b"-----BEGIN PRIVATE KEY-----\n", b"MIIEowIBAAKCAQEA7bq9v0xLk1q\n"]
    final, seen = _scrubbed(lines, Redactor(environ={}))
    assert seen == [b"", b""] and final == b"-----BEGIN PRIVATE KEY-----\n[REDACTED]\n"


@pytest.mark.slow
def test_a_drain_told_to_stop_writes_what_the_pipes_hold_and_ends() -> None:
    read_fd, write_fd = os.pipe()
    file = io.BytesIO()
    drain = Drain({read_fd: Verbatim(file)})
    drain.start()
    os.write(write_fd, b"a line\n")
    assert not drain.join(0.2)  # the pipe is still open: the drain waits
    drain.stop()
    assert drain.join(0) and file.getvalue() == b"a line\n"
    os.close(write_fd)


def test_a_pipe_whose_file_fails_keeps_flowing_and_the_others_are_drained() -> None:
    class Full(io.BytesIO):
        def write(self, data: bytes) -> int:  # type: ignore[override]
            raise OSError(28, "No space left on device")

    pipes = [os.pipe(), os.pipe()]
    ok = io.BytesIO()
    drain = Drain({pipes[0][0]: Verbatim(Full()), pipes[1][0]: Verbatim(ok)})
    drain.start()
    # Far more than a pipe holds: a writer would block if no one read the failed pipe.
    writer = threading.Thread(target=lambda: (os.write(pipes[0][1], b"x" * 2**20),
                                              os.close(pipes[0][1])))
    writer.start()
    os.write(pipes[1][1], b"kept\n")
    os.close(pipes[1][1])
    writer.join(30)
    assert not writer.is_alive()
    assert drain.join(30)
    assert isinstance(drain.failure, OSError) and ok.getvalue() == b"kept\n"
