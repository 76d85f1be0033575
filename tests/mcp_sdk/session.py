#!/usr/bin/env python3
"""A scripted session of the official Python MCP SDK against `conductor mcp`.

    session.py CONDUCTOR_BINARY ROOT

Submits task s1, then s2 continuing from it with `wait: true` (progress reported through
the SDK's callback), retries s1 and reads the totals. The SDK validates every
structuredContent against the tool's outputSchema (jsonschema) and raises if one does
not fit, so a session that gets through says the schemas are right. Prints one JSON
object with what it saw; exits non-zero on any error.
"""
import asyncio
import json
import sys

from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(binary: str, root: str) -> None:
    params = StdioServerParameters(
        command=binary, args=["mcp", "--root", root], env={"CONDUCTOR_HOME": root}
    )
    seen = {"progress": []}

    async def progress(done, total, message):
        seen["progress"].append(message)

    async with stdio_client(params) as streams:
        async with ClientSession(streams[0], streams[1]) as s:
            seen["protocol"] = (await s.initialize()).protocol_version
            seen["tools"] = sorted(t.name for t in (await s.list_tools()).tools)

            async def call(name, args, **kw):
                r = await s.call_tool(name, args, **kw)
                if r.is_error:
                    raise RuntimeError(f"{name}: {r.content}")
                return r.structured_content

            await call("submit", {"prompt": "first", "id": "s1"})
            await call("wait", {"ids": ["s1"], "timeoutSecs": 50})
            seen["submitWait"] = await call(
                "submit",
                {"prompt": "second", "id": "s2", "continueFrom": "s1", "wait": True,
                 "waitSecs": 50},
                progress_callback=progress,
            )
            seen["retry"] = await call("retry", {"id": "s1", "prompt": "first again"})
            await call("wait", {"ids": [seen["retry"]["id"]], "timeoutSecs": 50})
            seen["totals"] = await call("totals", {})
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2]))
