"""The client's SSE parser, fed byte streams cut at every possible place."""

from __future__ import annotations

import json

import pytest

from benchgate.client import (
    ERROR_MALFORMED,
    ERROR_NO_TOKENS,
    ERROR_SERVER,
    ERROR_STREAM_CUT,
    RequestRecord,
    _Stream,
)


def event(obj, nl: str = "\n") -> str:
    return f"data: {json.dumps(obj)}{nl}{nl}"


def text_chunk(text: str) -> dict:
    return {"id": "x", "choices": [{"index": 0, "text": text, "finish_reason": None}]}


USAGE = {"id": "x", "choices": [], "usage": {"prompt_tokens": 7, "completion_tokens": 3}}


def parse(body: bytes, cuts: list[int], chat: bool = False) -> RequestRecord:
    """Feed ``body`` in pieces split at ``cuts``; piece i arrives at time i + 1."""
    rec = RequestRecord(index=0, start_s=0.0)
    stream = _Stream(rec, 0.0, chat)
    bounds = [0, *cuts, len(body)]
    for i, (a, b) in enumerate(zip(bounds, bounds[1:])):
        if not stream.feed(body[a:b], float(i + 1)):
            return rec
    stream.finish()
    return rec


def every_split(body: bytes):
    yield []
    for k in range(1, len(body)):
        yield [k]


COMPLETION = (
    event(text_chunk(" héllo"))  # non-ASCII: a cut can fall inside a UTF-8 sequence
    + ": ping\n\n"
    + event(text_chunk(""))  # empty text still counts (a partial UTF-8 token)
    + "event: message\nid: 3\n"
    + event(text_chunk(" end"))
    + event(USAGE)
    + "data: [DONE]\n\n"
).encode()


@pytest.mark.parametrize("cuts", list(every_split(COMPLETION)))
def test_completion_stream_any_split(cuts):
    rec = parse(COMPLETION, cuts)
    assert rec.ok, rec.detail
    assert rec.chunks == 3 and rec.output_tokens == 3 and rec.usage_reported
    assert rec.prompt_tokens == 7
    assert len(rec.itl_s) == 2
    # Timing: an event is read when the piece holding its blank line has arrived.
    first_end = COMPLETION.index(b"\n\n") + 2
    last_end = COMPLETION.index(b"\n\n", COMPLETION.index(b" end")) + 2
    assert rec.ttft_s == (1.0 if not cuts or cuts[0] >= first_end else 2.0)
    assert rec.e2el_s == (1.0 if not cuts or cuts[0] >= last_end else 2.0)
    assert rec.ttft_s + sum(rec.itl_s) == pytest.approx(rec.e2el_s)


def test_events_in_one_read_share_its_timestamp():
    body = (event(text_chunk("a")) * 4 + "data: [DONE]\n\n").encode()
    rec = parse(body, [len(event(text_chunk("a")))])  # 1 event, then 3 in the next read
    assert rec.ttft_s == 1.0 and rec.itl_s == [1.0, 0.0, 0.0] and rec.e2el_s == 2.0
    assert rec.output_tokens == 4 and not rec.usage_reported


def test_crlf_line_ends_and_no_space_after_colon():
    body = (
        "data:" + json.dumps(text_chunk("a")) + "\r\n\r\n"
        + event(text_chunk("b"), "\r\n")
        + "data: [DONE]\r\n\r\n"
    ).encode()  # fmt: skip
    for cuts in every_split(body):
        rec = parse(body, cuts)
        assert rec.ok and rec.chunks == 2, (cuts, rec.detail)


def test_chat_role_chunk_is_not_a_token():
    role = {"choices": [{"index": 0, "delta": {"role": "assistant", "content": ""}}]}
    tok = {"choices": [{"index": 0, "delta": {"content": "hi"}}]}
    reasoning = {"choices": [{"index": 0, "delta": {"reasoning_content": "hmm"}}]}
    body = (event(role) + event(reasoning) + event(tok) + "data: [DONE]\n\n").encode()
    rec = parse(body, [len(event(role))], chat=True)
    assert rec.ok and rec.chunks == 2
    assert rec.ttft_s == 2.0  # the role arrived at 1.0 but carries no token


def test_done_without_final_newline():
    rec = parse((event(text_chunk("a")) + "data: [DONE]").encode(), [])
    assert rec.ok and rec.chunks == 1


def test_everything_after_done_is_ignored():
    body = event(text_chunk("a")) + "data: [DONE]\n\n" + event(text_chunk("b")) + "junk\n\n"
    rec = parse(body.encode(), [])
    assert rec.ok and rec.chunks == 1


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (event(text_chunk("a")), ERROR_STREAM_CUT),  # no [DONE]
        (event(text_chunk("a")) + event(text_chunk("b"))[:20], ERROR_STREAM_CUT),
        (event(USAGE) + "data: [DONE]\n\n", ERROR_NO_TOKENS),
        (": only a ping\n\ndata: [DONE]\n\n", ERROR_NO_TOKENS),
        (event(text_chunk("a")) + "data: {not json\n\ndata: [DONE]\n\n", ERROR_MALFORMED),
        (event(text_chunk("a")) + 'data: {"a": 1} trailing\n\n', ERROR_MALFORMED),
        (event(text_chunk("a")) + "data: [1, 2]\n\ndata: [DONE]\n\n", ERROR_MALFORMED),
        (event(text_chunk("a")) + "hello world\n\ndata: [DONE]\n\n", ERROR_MALFORMED),
        (event(text_chunk("a")) + event({"error": {"message": "boom"}}), ERROR_SERVER),
    ],
)
def test_failures_are_classified(body, reason):
    for cuts in ([], [len(body) // 2]):
        rec = parse(body.encode(), cuts)
        assert rec.error == reason, (cuts, rec.error, rec.detail)
        assert rec.e2el_s is None


def test_invalid_utf8_is_malformed():
    body = b'data: {"choices": [{"text": "\xff"}]}\n\ndata: [DONE]\n\n'
    rec = parse(body, [])
    assert rec.error == ERROR_MALFORMED


def test_server_error_detail_is_kept():
    body = (event(text_chunk("a")) + event({"error": {"message": "boom", "code": 500}})).encode()
    rec = parse(body, [])
    assert rec.error == ERROR_SERVER and "boom" in (rec.detail or "")
