"""The coding-CLI harness's three stream readers (claude-code, codex, opencode), line by line:
the steps and answer each reads from good lines, bad lines skipped and counted, a stream with
no result, and a failure the CLI reports."""

from __future__ import annotations

import json

import pytest

from jobs.harnesses.cli_streams import ClaudeStream, CodexStream, OpencodeStream

CLAUDE_LINES = [
    {"type": "system", "subtype": "init", "model": "claude-sonnet", "tools": []},
    {
        "type": "assistant",
        "message": {"content": [{"type": "tool_use", "name": "Bash", "input": {"command": "ls"}}]},
    },
    {"type": "user", "message": {"content": [{"type": "tool_result", "content": "a\nb"}]}},
    {"type": "assistant", "message": {"content": [{"type": "text", "text": "Two files."}]}},
    {
        "type": "result",
        "subtype": "success",
        "is_error": False,
        "result": "There are two files.",
        "usage": {"input_tokens": 10, "output_tokens": 4},
    },
]
CODEX_LINES = [
    {"type": "thread.started", "thread_id": "t1"},
    {"type": "turn.started"},
    {"type": "item.started", "item": {"id": "i0", "type": "command_execution", "command": "ls"}},
    {"type": "item.completed", "item": {"id": "i0", "type": "command_execution", "command": "ls"}},
    {
        "type": "item.started",
        "item": {"id": "i1", "type": "mcp_tool_call", "server": "aegis", "tool": "read_clock"},
    },
    {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": "Done."}},
    {"type": "turn.completed", "usage": {"input_tokens": 10, "output_tokens": 4}},
]
OPENCODE_LINES = [
    {"type": "step_start", "part": {"type": "step-start"}},
    {"type": "text", "part": {"type": "text", "text": "Let me look."}},
    {"type": "tool_use", "part": {"tool": "bash", "state": {"status": "completed", "input": {}}}},
    {"type": "step_finish", "part": {"reason": "tool-calls", "tokens": {"input": 5}}},
    {"type": "step_start", "part": {"type": "step-start"}},
    {"type": "text", "part": {"type": "text", "text": "It is tidy."}},
    {"type": "step_finish", "part": {"reason": "stop", "tokens": {"input": 5, "output": 3}}},
]


def feed(reader, events, *extra_lines):
    steps = []
    for line in [json.dumps(e) for e in events] + list(extra_lines):
        steps += reader.feed(line)
    return steps


def test_claude_stream_gives_steps_and_the_result_event():
    reader = ClaudeStream()
    steps = feed(reader, CLAUDE_LINES)
    assert steps == ["started (claude-sonnet)", "using Bash ls", "writing: Two files."]
    assert reader.answer() == "There are two files."
    assert [call.failed for call in reader.calls] == [False]
    assert (reader.input_tokens, reader.output_tokens) == (10, 4)
    assert reader.failure is None and reader.malformed == 0


def test_codex_stream_answers_with_the_last_agent_message():
    reader = CodexStream()
    steps = feed(reader, CODEX_LINES)
    assert steps == ["running ls", "calling aegis.read_clock", "writing: Done."]
    assert reader.answer() == "Done." and [c.tool for c in reader.calls] == ["command_execution"]


def test_opencode_stream_answers_with_the_last_step_that_ended_the_turn():
    reader = OpencodeStream()
    steps = feed(reader, OPENCODE_LINES)
    assert steps == ["writing: Let me look.", "used bash", "writing: It is tidy."]
    assert reader.answer() == "It is tidy." and [c.tool for c in reader.calls] == ["bash"]


# A call refused or failed, as each CLI prints it: Codex refusing an aegis tool before it
# reaches aegis (approval policy never), a Claude Code tool result that is an error (a built-in
# its settings deny, or aegis's "nothing was done"), an OpenCode tool part that ended in error.
REFUSED = "MCP tool call requires approval, but approval policy is never"
FAILED_CALLS = {
    ClaudeStream: [
        {
            "type": "assistant",
            "message": {"content": [{"type": "tool_use", "id": "t1", "name": "Write"}]},
        },
        {
            "type": "user",
            "message": {
                "content": [
                    {
                        "type": "tool_result",
                        "tool_use_id": "t1",
                        "is_error": True,
                        "content": [{"type": "text", "text": REFUSED}],
                    }
                ]
            },
        },
        {"type": "result", "subtype": "success", "is_error": False, "result": "I could not."},
    ],
    CodexStream: [
        {
            "type": "item.completed",
            "item": {
                "id": "i1",
                "type": "mcp_tool_call",
                "server": "aegis",
                "tool": "tasks-create",
                "status": "failed",
                "error": {"message": REFUSED},
            },
        },
        {"type": "item.completed", "item": {"id": "i2", "type": "agent_message", "text": "No."}},
        {"type": "turn.completed", "usage": {}},
    ],
    OpencodeStream: [
        {"type": "step_start", "part": {}},
        {
            "type": "tool_use",
            "part": {"tool": "aegis_tasks-create", "state": {"status": "error", "error": REFUSED}},
        },
        {"type": "step_finish", "part": {"reason": "tool-calls"}},
        {"type": "step_start", "part": {}},
        {"type": "text", "part": {"text": "It did not work."}},
        {"type": "step_finish", "part": {"reason": "stop"}},
    ],
}


@pytest.mark.parametrize("reader_type", sorted(FAILED_CALLS, key=lambda t: t.__name__))
def test_a_call_that_was_refused_or_failed_is_counted_apart_with_why(reader_type):
    reader = reader_type()
    feed(reader, FAILED_CALLS[reader_type])
    [call] = reader.calls
    assert call.failed and REFUSED in call.words()
    assert reader.answer() is not None  # the CLI calls it done; the harness does not (below)


def test_a_codex_error_given_as_a_string_still_ends_its_call_failed():
    reader = CodexStream()
    item = {"id": "i1", "type": "mcp_tool_call", "server": "aegis", "tool": "x", "error": "no"}
    feed(reader, [{"type": "item.completed", "item": item}])
    assert [(c.tool, c.failed, c.reason) for c in reader.calls] == [("aegis.x", True, "no")]
    assert reader.malformed == 0


@pytest.mark.parametrize(
    ("reader_type", "events"),
    [(ClaudeStream, CLAUDE_LINES), (CodexStream, CODEX_LINES), (OpencodeStream, OPENCODE_LINES)],
)
def test_bad_lines_are_skipped_and_counted(reader_type, events):
    reader = reader_type()
    feed(reader, events[:2], "not json", '{"cut": ', "[1, 2]", '"text"', "")
    feed(reader, events[2:])
    assert reader.malformed == 4  # the blank line is no line at all
    assert reader.answer() is not None


def test_an_event_of_an_unexpected_shape_is_counted_as_unreadable():
    reader = ClaudeStream()
    feed(reader, [{"type": "assistant", "message": 3}, {"type": "something new"}])
    assert (reader.events, reader.malformed) == (2, 1)


def test_a_stream_without_a_result_falls_back_to_the_last_text_or_to_nothing():
    reader = ClaudeStream()
    feed(reader, CLAUDE_LINES[:4])
    assert reader.answer() == "Two files."  # no result event: the last assistant message
    reader = ClaudeStream()
    feed(reader, CLAUDE_LINES[:3], "garbage")
    assert reader.answer() is None


@pytest.mark.parametrize(
    ("reader_type", "event", "failure"),
    [
        (
            ClaudeStream,
            {"type": "result", "subtype": "error_max_turns", "is_error": True},
            "it ended with error_max_turns",
        ),
        (
            CodexStream,
            {"type": "turn.failed", "error": {"message": "quota exceeded"}},
            "quota exceeded",
        ),
        (CodexStream, {"type": "error", "message": "stream closed"}, "stream closed"),
        (
            OpencodeStream,
            {"type": "error", "error": {"name": "APIError", "data": {"message": "401"}}},
            "401",
        ),
    ],
)
def test_a_failure_the_cli_reports_is_kept(reader_type, event, failure):
    reader = reader_type()
    feed(reader, [event])
    assert reader.failure == failure


@pytest.mark.parametrize(
    ("reader_type", "event", "session"),
    [
        (ClaudeStream, {"type": "system", "subtype": "init", "session_id": "5b0c-11"}, "5b0c-11"),
        (CodexStream, {"type": "thread.started", "thread_id": "0199-ab"}, "0199-ab"),
        (OpencodeStream, {"type": "step_start", "sessionID": "ses_9", "part": {}}, "ses_9"),
        # Anything that could read as a flag, or is not an id, is never kept for a command line.
        (ClaudeStream, {"type": "system", "session_id": "--dangerously-skip-permissions"}, None),
        (CodexStream, {"type": "thread.started", "thread_id": "a b"}, None),
        (OpencodeStream, {"type": "text", "sessionID": ["ses_9"], "part": {}}, None),
    ],
)
def test_the_session_a_stream_names_is_kept_only_when_it_is_an_id(reader_type, event, session):
    reader = reader_type()
    feed(reader, [event])
    assert reader.session == session
