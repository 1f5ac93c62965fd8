"""An agent's flow through `polaris mcp` with the official Python MCP SDK (`mcp` 2.x).

    python3 tests/python/mcp_sdk_flow.py POLARIS_BIN SOCKET_DIR MODE

MODE is one of:
  legacy  the initialize handshake (2025-11-25), no Tasks extension
  modern  server/discover and self-contained requests (2026-07-28), no Tasks extension
  tasks   2026-07-28 with the Tasks extension declared: a slow press comes back as a task,
          which this client polls with tasks/get until it is completed

The flow: connect, list the tools, task_start on the fixture page, fill, press, the press
again under the same request_id (a replay from the receipt), task_status. Every check that
fails raises; the last line printed is a JSON summary the Rust test reads (tests/mcp/mcp_python.rs).
"""

from __future__ import annotations

import asyncio
import json
import sys
import uuid
from typing import Any, Literal

from pydantic import Field

from mcp import Client, StdioServerParameters
from mcp.client.extension import ClaimContext, ClientExtension, ResultClaim
import mcp_types as types

TASKS = "io.modelcontextprotocol/tasks"


class TaskHandle(types.Result):
    """`resultType: "task"` (SEP-2663): a tool call the server runs on as a task."""

    result_type: Literal["task"] = Field(alias="resultType")
    task_id: str
    status: str
    poll_interval_ms: int | None = None


class GetTaskParams(types.RequestParams):
    task_id: str


class GetTask(types.Request[GetTaskParams, Literal["tasks/get"]]):
    method: Literal["tasks/get"] = "tasks/get"
    params: GetTaskParams


class TaskState(types.Result):
    task_id: str
    status: str
    status_message: str | None = None
    result: dict[str, Any] | None = None


class Tasks(ClientExtension):
    """The client side of the Tasks extension: a task handle is polled to its result."""

    identifier = TASKS

    def __init__(self) -> None:
        self.handles: list[str] = []
        self.statuses: list[str] = []

    def claims(self) -> list[ResultClaim[Any]]:
        return [ResultClaim(result_type="task", model=TaskHandle, resolve=self.resolve)]

    async def resolve(self, handle: TaskHandle, ctx: ClaimContext) -> types.CallToolResult:
        self.handles.append(handle.task_id)
        interval = (handle.poll_interval_ms or 500) / 1000
        for _ in range(200):
            state = await ctx.session.send_request(
                GetTask(params=GetTaskParams(task_id=handle.task_id)), TaskState
            )
            self.statuses.append(state.status)
            if state.status == "completed":
                assert state.result is not None, state
                return types.CallToolResult.model_validate(state.result)
            assert state.status == "working", state
            await asyncio.sleep(interval)
        raise AssertionError(f"task {handle.task_id} did not complete")


def body(result: types.CallToolResult) -> dict[str, Any]:
    assert result.structured_content is not None, result
    text = result.content[0].text  # type: ignore[union-attr]
    assert json.loads(text) == result.structured_content, "the text carries the same JSON"
    return result.structured_content


async def flow(binary: str, socket_dir: str, mode: str) -> dict[str, Any]:
    tasks = Tasks() if mode == "tasks" else None
    args = ["mcp", "--socket-dir", socket_dir]
    # A slow submit and a short wait make the press outlast --call-wait-ms with tasks on.
    delay = 0
    if mode == "tasks":
        args += ["--call-wait-ms", "200"]
        delay = 1500
    server = StdioServerParameters(command=binary, args=args)
    async with Client(
        server,
        mode="legacy" if mode == "legacy" else "auto",
        extensions=[tasks] if tasks else None,
        read_timeout_seconds=30,
    ) as client:
        version = client.protocol_version
        expected = "2025-11-25" if mode == "legacy" else "2026-07-28"
        assert version == expected, (version, expected)
        declared = (client.server_capabilities.extensions or {}).keys()
        assert TASKS in declared, declared

        tools = await client.list_tools()
        names = [t.name for t in tools.tools]
        for name in ["task_start", "page_fill", "page_press", "task_status", "request_status"]:
            assert name in names, names

        started = body(
            await client.call_tool(
                "task_start", {"title": "Post", "fixture": {"submit_delay_ms": delay}}
            )
        )
        task = started["result"]["task_id"]
        filled = await client.call_tool(
            "page_fill", {"task_id": task, "target": "#title", "value": "Hello"}
        )
        assert not filled.is_error, filled

        press_id = str(uuid.uuid4())
        press = {
            "task_id": task,
            "key": "Enter",
            "target": "#title",
            "request_id": press_id,
            "expect": {"target": "#status", "contains": "Saved"},
        }
        pressed = await client.call_tool("page_press", press)
        first = body(pressed)
        assert not pressed.is_error, first
        assert first["request_id"] == press_id, first
        assert first["result"]["observation"]["value"] == "Saved #1", first

        again = await client.call_tool("page_press", press)
        replay = body(again)
        assert not again.is_error, replay
        assert replay["receipt"] == "replayed", replay
        assert replay["result"] == first["result"], (replay, first)

        status = body(await client.call_tool("task_status", {"task_id": task}))
        history = status["result"]["history"]
        presses = [h for h in history if h["request_id"] == press_id]
        assert len(presses) == 1 and presses[0]["result"] == "ok", history

        return {
            "mode": mode,
            "protocol": version,
            "task_id": task,
            "press_request_id": press_id,
            "first_receipt": first.get("receipt"),
            "replay_receipt": replay["receipt"],
            "task_handles": tasks.handles if tasks else [],
            "task_statuses": tasks.statuses if tasks else [],
        }


def main() -> None:
    binary, socket_dir, mode = sys.argv[1:4]
    assert mode in ("legacy", "modern", "tasks"), mode
    summary = asyncio.run(flow(binary, socket_dir, mode))
    print(json.dumps(summary))


if __name__ == "__main__":
    main()
