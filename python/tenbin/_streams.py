"""What Connection and Loader share of numbered streams: the exception of
an end, and states as the library's JSON."""

from __future__ import annotations

import json

from ._errors import BadArgument, EpochEnd, StreamEnd

__all__ = ["state_json", "stream_end"]


def stream_end(conn, urls):
    """The exception of a receive that gave nothing at an end: StreamEnd
    once the stream ended (with the epoch it ended, if any), else EpochEnd."""
    where = urls[0] if len(urls) == 1 else f"{urls[0]} and {len(urls) - 1} more"
    if conn.stream_ended():
        return StreamEnd(f"the stream ended on {where}")
    return EpochEnd(f"epoch {conn.epoch() - 1} ended on {where}")


def state_json(state):
    """A ``state_dict()`` as the library's JSON."""
    try:
        return json.dumps(state)
    except (TypeError, ValueError) as e:
        raise BadArgument(f"a stream state is a dict as state_dict() gives: {e}") from None
