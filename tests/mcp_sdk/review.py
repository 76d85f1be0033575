#!/usr/bin/env python3
"""The review tools (`diff`, `merge`, `discard`) driven by the official Python MCP SDK.

    review.py CONDUCTOR_BINARY ROOT REPO

Submits three worktree tasks in REPO one after another (r1 and r2 write the same file, r3
another), diffs r1, merges all (r2 conflicts), discards r2. The SDK validates every
structuredContent against the tool's outputSchema (jsonschema) and raises if one does
not fit. Prints one JSON object with the answers; exits non-zero on any error.
"""
import asyncio
import json
import sys

from mcp.client import ClientSession
from mcp.client.stdio import StdioServerParameters, stdio_client


async def main(binary: str, root: str, repo: str) -> None:
    params = StdioServerParameters(
        command=binary, args=["mcp", "--root", root], env={"CONDUCTOR_HOME": root}
    )
    seen = {}
    async with stdio_client(params) as streams:
        async with ClientSession(streams[0], streams[1]) as s:
            await s.initialize()
            seen["tools"] = sorted(t.name for t in (await s.list_tools()).tools)

            async def call(name, args):
                r = await s.call_tool(name, args)
                if r.is_error:
                    raise RuntimeError(f"{name}: {r.content}")
                return r.structured_content

            for tid, prompt in [("r1", "WRITE a.txt one"), ("r2", "WRITE a.txt two"),
                                ("r3", "WRITE c.txt three")]:
                await call("submit", {"prompt": prompt, "id": tid, "worktree": True,
                                      "dir": repo})
                await call("wait", {"ids": [tid], "timeoutSecs": 50})
            seen["diff"] = await call("diff", {"id": "r1", "maxBytes": 4096})
            seen["merge"] = await call("merge", {"all": True})
            seen["discard"] = await call("discard", {"id": "r2", "force": True})
    print(json.dumps(seen))


asyncio.run(main(sys.argv[1], sys.argv[2], sys.argv[3]))
