"""An agent's walk of the test site through `polaris mcp`, driven by the official Python MCP SDK.

Started by `tests/browser/browser_mcp.rs` (`the_python_sdk_works_the_site_by_what_it_sees`), which runs
the host, the browser and the web app and counts every POST at the app's server afterwards.
The walk uses no CSS of its own: every target is a ref read from a `page_snapshot`, a role and
name, or a text.

Environment: POLARIS_BIN (the binary), POLARIS_SOCKET_DIR (the host's socket directory),
SITE (the web app's base URL, no trailing slash). Exits non-zero with the failing step on stderr.
"""

import asyncio
import json
import os
import re
import sys

from mcp import ClientSession, StdioServerParameters
from mcp.client.stdio import stdio_client


def ref_named(outline: str, name: str) -> dict:
    """The ref of the first outline line naming `name` (quoted) that carries a ref."""
    for line in outline.splitlines():
        if f'"{name}"' in line:
            m = re.search(r"\[ref=(e\d+)\]", line)
            if m:
                return {"ref": m.group(1)}
    raise AssertionError(f'no "{name}" with a ref in the outline:\n{outline}')


class Agent:
    def __init__(self, session: ClientSession):
        self.session = session

    async def call(self, tool: str, args: dict):
        result = await self.session.call_tool(tool, args)
        return result

    async def act(self, tool: str, args: dict) -> dict:
        result = await self.call(tool, args)
        body = result.structured_content
        if result.is_error or body is None:
            raise AssertionError(f"{tool} {json.dumps(args)} failed: {body}")
        return body

    async def refused(self, tool: str, args: dict) -> dict:
        result = await self.call(tool, args)
        body = result.structured_content
        if not result.is_error:
            raise AssertionError(f"{tool} {json.dumps(args)} should be refused: {body}")
        if body.get("automaticReplay") is not False:
            raise AssertionError(f"a refusal must never invite a replay: {body}")
        return body

    async def see(self, task: str) -> str:
        body = await self.act("page_snapshot", {"task_id": task})
        return body["result"]["snapshot"]


async def walk() -> None:
    site = os.environ["SITE"]
    server = StdioServerParameters(
        command=os.environ["POLARIS_BIN"],
        args=["mcp", "--socket-dir", os.environ["POLARIS_SOCKET_DIR"]],
    )
    async with stdio_client(server) as (read, write):
        async with ClientSession(read, write) as session:
            await session.initialize()
            tools = {t.name: t for t in (await session.list_tools()).tools}
            for name in ["page_snapshot", "page_navigate", "page_upload", "page_wait", "task_save_profile"]:
                assert name in tools, f"{name} is not offered: {sorted(tools)}"
            assert tools["page_snapshot"].annotations.read_only_hint is True
            assert tools["page_click"].annotations.read_only_hint is False

            a = Agent(session)
            started = await a.act("task_start", {"title": "work the site", "url": f"{site}/site/login"})
            task = started["result"]["task_id"]

            # Log in.
            outline = await a.see(task)
            await a.act("page_fill", {"task_id": task, "target": ref_named(outline, "Username"), "value": "ada"})
            await a.act("page_fill", {"task_id": task, "target": ref_named(outline, "Password"), "value": "secret"})
            await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Log in"},
                                       "expect": {"text": {"contains": "Logged in as ada"}}})

            # Every control, then one publish.
            outline = await a.see(task)
            await a.act("page_fill", {"task_id": task, "target": ref_named(outline, "Title"), "value": "Launch notes"})
            await a.act("page_fill", {"task_id": task, "target": ref_named(outline, "Body"), "value": "What shipped."})
            await a.act("page_select", {"task_id": task, "target": ref_named(outline, "Category"), "label": "How-to guide"})
            await a.act("page_check", {"task_id": task, "target": ref_named(outline, "Urgent"), "checked": True})
            await a.act("page_check", {"task_id": task, "target": ref_named(outline, "Private"), "checked": True})
            await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Publish"},
                                       "expect": {"text": {"contains": "Published #1"}}})

            # A ref from an older outline is refused before anything is sent.
            stale = await a.refused("page_click", {"task_id": task, "target": ref_named(outline, "Publish"),
                                                    "expect": {"text": {"contains": "Published #2"}}})
            assert stale.get("details", {}).get("cause") == "stale_ref", stale

            # To the form by URL, to the drafts by link, back through the history.
            await a.act("page_navigate", {"task_id": task, "url": f"{site}/site"})
            await a.act("page_click", {"task_id": task, "target": {"role": "link", "name": "Drafts"},
                                       "expect": {"url": {"contains": "/site/drafts"}}})
            await a.act("page_navigate", {"task_id": task, "url": "back"})
            url = await a.act("page_url", {"task_id": task})
            assert url["result"]["url"].endswith("/site"), url

            # Frames of both origins and a shadow root.
            await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Confirm in frame"},
                                       "expect": {"target": {"text": "Frame confirmed"}, "contains": "#1"}})
            outline = await a.see(task)
            await a.act("page_fill", {"task_id": task, "target": ref_named(outline, "Card number"), "value": "4242424242424242"})
            await a.act("page_click", {"task_id": task, "target": ref_named(outline, "Pay"),
                                       "expect": {"target": {"text": "Paid", "frame": {"role": "iframe", "name": "Payment"}},
                                                  "contains": "#1"}})
            await a.act("page_fill", {"task_id": task, "target": {"role": "textbox", "name": "Note"}, "value": "call the printer"})
            await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Save note"},
                                       "expect": {"target": {"text": "Note saved"}, "contains": "#1"}})

            # The late button, waited for and pressed.
            await a.act("page_wait", {"task_id": task, "target": {"role": "button", "name": "Load more"}, "timeout_ms": 5000})
            await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Load more"},
                                       "expect": {"target": {"text": "More loaded"}, "contains": "#1"}})

            # The confirm() before a delete, accepted.
            deleted = await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Delete draft"},
                                                 "dialog": {"accept": True, "message": {"contains": "Delete the draft"}},
                                                 "expect": {"text": {"contains": "Draft deleted #1"}}})
            assert deleted["result"]["dialogs"][0]["type"] == "confirm", deleted

            # An upload from the upload directory; a path outside it is refused.
            outline = await a.see(task)
            outside = await a.refused("page_upload", {"task_id": task, "target": ref_named(outline, "Attachment"),
                                                      "files": ["../outside.txt"]})
            assert outside["code"] == "BAD_REQUEST", outside
            await a.act("page_upload", {"task_id": task, "target": ref_named(outline, "Attachment"), "files": ["report.txt"]})
            await a.act("page_click", {"task_id": task, "target": {"role": "button", "name": "Upload"},
                                       "expect": {"text": {"contains": "Uploaded report.txt"}}})

            # The tab the help link opens.
            await a.act("page_navigate", {"task_id": task, "url": f"{site}/site"})
            opened = await a.act("page_click", {"task_id": task, "target": {"role": "link", "name": "Open help"},
                                                "expect": None, "local": True})
            assert opened["result"]["opened"][0]["tab"] == 1, opened
            help_title = await a.act("page_read", {"task_id": task, "tab": 1, "target": {"role": "heading", "name": "Help"}})
            assert help_title["result"]["value"] == "Help", help_title

            # The login, saved and used by a second task.
            await a.act("task_save_profile", {"task_id": task, "profile": "ada"})
            await a.act("task_finish", {"task_id": task})
            second = await a.act("task_start", {"title": "logged in already", "url": f"{site}/site", "profile": "ada"})
            other = second["result"]["task_id"]
            text = await a.act("page_read", {"task_id": other, "target": {"text": "Logged in as ada"}})
            assert "Logged in as ada" in text["result"]["value"], text
            await a.act("task_finish", {"task_id": other})


if __name__ == "__main__":
    try:
        asyncio.run(walk())
    except Exception as e:  # the runner prints this and fails
        print(f"site walk failed: {type(e).__name__}: {e}", file=sys.stderr)
        raise
    print("site walk done")
