#!/usr/bin/env python3
"""A scripted model server: stands in for the model behind a real agent CLI in tests.

Speaks, on 127.0.0.1 only:
  * the Anthropic Messages API (Claude Code): POST /v1/messages, streamed as SSE
    (message_start, content_block_start, content_block_delta with text_delta or
    input_json_delta, content_block_stop, message_delta with usage and stop_reason,
    message_stop) or as one JSON message; POST /v1/messages/count_tokens;
  * the OpenAI Responses API (codex): POST .../responses, streamed as SSE
    (response.created, response.output_item.added/done, response.output_text.delta,
    response.completed with usage);
  * the Gemini API (gemini-cli): POST .../models/M:streamGenerateContent (SSE with
    ?alt=sse, else a JSON array), :generateContent, :countTokens.

It plays a script, one JSON file per test:

  {"turns": [TURN, ...], "side_text": "ok"}        (or just the list of turns)
  {"routes": [{"match": "TASK-A", "turns": [TURN, ...]}, ...], "turns": [...]}

  TURN: {"text": "answer"}                            a plain answer, ends the turn
        {"text": "...", "tools": [{"name": "Bash", "input": {"command": "ls"}}]}
                                                      tool calls (text optional)
        {"error": {"status": 529, "body": {...} | "text", "headers": {"retry-after": "0"}},
         "times": 3}                                  an error, answered `times` times
        any TURN may add "usage": {"input_tokens": N, "output_tokens": M}

Which requests take the next turn: those that offer the model tools (the agent's own
loop). Requests without tools (titles, quota checks, summaries and other side traffic a
CLI sends) get a short canned answer (`side_text`) and leave the script alone, and so do
agent requests once the script is played out (answer: "script exhausted").

Routes let several agents share one server, each playing its own turns: an agent
request whose conversation opens with a user message containing a route's `match`
(the text of every user message before the model's first answer: Claude's `messages`,
Codex's `input`, Gemini's `contents`) plays that route's turns, the first route that
matches; any other plays the top-level `turns`. An orchestrator's script can name its
workers' tasks (their ids or prompts), and each worker's request finds its own route
however the tasks were spread over the workers. Each route is played out on its own.

Every request is appended to the JSONL file given by --record when its answer is
complete: {"seq", "t_start", "t_end" (Unix seconds), "method", "path", "api", "kind":
"scripted"|"side"|"exhausted"|"unknown", "route" (the match played, null for the
top-level turns), "turn", "status", "headers", "body"}.

Usage: server.py --script FILE --record FILE [--port-file FILE]
It binds 127.0.0.1 port 0, prints `listening 127.0.0.1:PORT` and writes PORT to
--port-file (atomically) once it accepts connections. Standard library only.
"""

import argparse
import json
import os
import re
import sys
import threading
import time
import uuid
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

LOCK = threading.Lock()
# Items of a Responses API input that the model produced (or that answer them): the
# conversation's opening ends at the first.
MODEL_ITEMS = {"function_call", "function_call_output", "custom_tool_call",
               "custom_tool_call_output", "reasoning", "local_shell_call"}


class Turns:
    """One list of turns played in order (the top-level script, or one route)."""

    def __init__(self, turns, where):
        if not isinstance(turns, list):
            raise SystemExit(f"script: {where} must be a list of turns")
        self.turns = turns
        self.next = 0
        self.served = 0  # times the current turn was answered (for "times")

    def take(self):
        """The next turn and its index, or (None, None) once played out."""
        with LOCK:
            if self.next >= len(self.turns):
                return None, None
            i = self.next
            turn = self.turns[i]
            self.served += 1
            if self.served >= int(turn.get("times", 1)):
                self.next += 1
                self.served = 0
            return turn, i


class Script:
    def __init__(self, path):
        with open(path, encoding="utf-8") as f:
            doc = json.load(f)
        if isinstance(doc, list):
            doc = {"turns": doc}
        self.main = Turns(doc.get("turns", []), "turns")
        self.side_text = doc.get("side_text", "ok")
        self.routes = []
        for n, r in enumerate(doc.get("routes", [])):
            match = r.get("match") if isinstance(r, dict) else None
            if not isinstance(match, str) or not match:
                raise SystemExit(f"script: routes[{n}].match must be a non-empty string")
            self.routes.append((match, Turns(r.get("turns", []), f"routes[{n}].turns")))

    def pick(self, opening):
        """The route whose match the conversation's opening contains, else the main turns."""
        for match, turns in self.routes:
            if match in opening:
                return match, turns
        return None, self.main


class Recorder:
    def __init__(self, path):
        self.path = path
        self.seq = 0

    def write(self, entry):
        with LOCK:
            self.seq += 1
            entry["seq"] = self.seq
            with open(self.path, "a", encoding="utf-8") as f:
                f.write(json.dumps(entry) + "\n")


def new_id(prefix):
    return prefix + uuid.uuid4().hex[:20]


def usage_of(turn):
    u = (turn or {}).get("usage") or {}
    return int(u.get("input_tokens", 25)), int(u.get("output_tokens", 10))


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"
    server_version = "scripted-model/1"

    def log_message(self, fmt, *args):  # quiet: the record file says it all
        pass

    # ---- plumbing ---------------------------------------------------------------

    def do_GET(self):
        self.handle_any()

    def do_POST(self):
        self.handle_any()

    def do_HEAD(self):
        self.handle_any()

    def handle_any(self):
        self.t_start = time.time()
        length = int(self.headers.get("content-length") or 0)
        raw = self.rfile.read(length) if length else b""
        try:
            self.body = json.loads(raw) if raw else None
        except ValueError:
            self.body = raw.decode("utf-8", "replace")
        self.entry = {
            "t_start": self.t_start,
            "method": self.command,
            "path": self.path,
            "headers": {k.lower(): v for k, v in self.headers.items()},
            "body": self.body,
            "api": None,
            "kind": "unknown",
            "turn": None,
            "status": None,
        }
        try:
            self.route()
        except (BrokenPipeError, ConnectionResetError):
            self.entry["status"] = self.entry["status"] or "disconnected"
        finally:
            self.entry["t_end"] = time.time()
            self.server.recorder.write(self.entry)

    def send_json(self, status, obj, headers=None):
        data = json.dumps(obj).encode()
        self.entry["status"] = status
        self.send_response(status)
        self.send_header("content-type", "application/json")
        self.send_header("content-length", str(len(data)))
        for k, v in (headers or {}).items():
            self.send_header(k, str(v))
        self.end_headers()
        self.wfile.write(data)

    def start_sse(self):
        self.entry["status"] = 200
        self.send_response(200)
        self.send_header("content-type", "text/event-stream")
        self.send_header("cache-control", "no-cache")
        self.send_header("connection", "close")
        self.close_connection = True
        self.end_headers()

    def sse(self, event, data):
        chunk = ""
        if event:
            chunk += f"event: {event}\n"
        chunk += f"data: {json.dumps(data)}\n\n"
        self.wfile.write(chunk.encode())
        self.wfile.flush()

    def send_error_turn(self, err, api):
        status = int(err.get("status", 500))
        body = err.get("body")
        if body is None or isinstance(body, str):
            message = body or f"scripted error {status}"
            if api == "anthropic":
                kind = {
                    400: "invalid_request_error",
                    401: "authentication_error",
                    403: "permission_error",
                    404: "not_found_error",
                    429: "rate_limit_error",
                    529: "overloaded_error",
                }.get(status, "api_error")
                body = {"type": "error", "error": {"type": kind, "message": message}}
            elif api == "gemini":
                grpc = {400: "INVALID_ARGUMENT", 401: "UNAUTHENTICATED", 403: "PERMISSION_DENIED",
                        404: "NOT_FOUND", 429: "RESOURCE_EXHAUSTED", 500: "INTERNAL",
                        503: "UNAVAILABLE", 504: "DEADLINE_EXCEEDED"}.get(status, "UNKNOWN")
                body = {"error": {"code": status, "message": message, "status": grpc}}
            else:
                body = {"error": {"message": message, "type": "server_error", "code": None}}
        self.send_json(status, body, err.get("headers"))

    # ---- routing ----------------------------------------------------------------

    def route(self):
        path = self.path.split("?", 1)[0]
        if self.command == "POST" and path.endswith("/messages/count_tokens"):
            self.entry.update(api="anthropic", kind="side")
            return self.send_json(200, {"input_tokens": 42})
        if self.command == "POST" and path.endswith("/messages"):
            self.entry["api"] = "anthropic"
            return self.conversation(bool(self.body_get("tools")), self.anthropic)
        if self.command == "POST" and path.endswith("/responses"):
            self.entry["api"] = "openai"
            # Codex offers its tools in `tools`, or (for models it knows) as an
            # `additional_tools` input item.
            extra = any(isinstance(i, dict) and i.get("type") == "additional_tools"
                        for i in self.body_get("input") or [])
            return self.conversation(bool(self.body_get("tools")) or extra, self.openai)
        m = re.search(r"/models/([^/:]+):(streamGenerateContent|generateContent|countTokens)$", path)
        if self.command == "POST" and m:
            self.entry["api"] = "gemini"
            if m.group(2) == "countTokens":
                self.entry["kind"] = "side"
                return self.send_json(200, {"totalTokens": 42})
            stream = m.group(2) == "streamGenerateContent"
            sse = "alt=sse" in self.path
            return self.conversation(
                bool(self.body_get("tools")),
                lambda turn, text: self.gemini(turn, text, stream, sse, m.group(1)),
            )
        if path.endswith("/models"):
            self.entry["kind"] = "side"
            return self.send_json(200, {"object": "list", "data": [], "models": []})
        self.send_json(404, {"error": {"message": f"no route for {self.command} {path}"}})

    def body_get(self, key):
        return self.body.get(key) if isinstance(self.body, dict) else None

    def conversation(self, agent_loop, answer):
        """Agent-loop requests play the next turn; others get the canned side answer."""
        script = self.server.script
        if not agent_loop:
            self.entry["kind"] = "side"
            return answer({"text": script.side_text}, True)
        route, turns = script.pick(self.opening())
        self.entry["route"] = route
        turn, i = turns.take()
        if turn is None:
            self.entry["kind"] = "exhausted"
            return answer({"text": "script exhausted"}, True)
        self.entry.update(kind="scripted", turn=i)
        if "error" in turn:
            return self.send_error_turn(turn["error"], self.entry["api"])
        return answer(turn, False)

    def opening(self):
        """The text of the user messages that open the conversation (before the model's
        first answer), for routing: the prompt an agent was given."""
        api = self.entry["api"]
        items = self.body_get({"anthropic": "messages", "openai": "input"}.get(api, "contents"))
        model_role = "model" if api == "gemini" else "assistant"
        texts = []
        for item in items if isinstance(items, list) else []:
            if not isinstance(item, dict):
                continue
            if item.get("role") == model_role or item.get("type") in MODEL_ITEMS:
                break
            if item.get("role") == "user":  # not the developer's or system's messages
                texts.append(text_of(item.get("content", item.get("parts"))))
        return "\n".join(texts)

    # ---- Anthropic Messages -----------------------------------------------------

    def anthropic(self, turn, _side):
        model = self.body_get("model") or "claude-scripted"
        text = turn.get("text")
        tools = turn.get("tools") or []
        blocks = []
        if text:
            blocks.append({"type": "text", "text": text})
        for t in tools:
            blocks.append({"type": "tool_use", "id": new_id("toolu_"), "name": t["name"],
                           "input": t.get("input", {})})
        stop = "tool_use" if tools else "end_turn"
        tin, tout = usage_of(turn)
        usage = {"input_tokens": tin, "output_tokens": tout,
                 "cache_creation_input_tokens": 0, "cache_read_input_tokens": 0}
        msg_id = new_id("msg_")
        if not self.body_get("stream"):
            return self.send_json(200, {
                "id": msg_id, "type": "message", "role": "assistant", "model": model,
                "content": blocks, "stop_reason": stop, "stop_sequence": None, "usage": usage})
        self.start_sse()
        self.sse("message_start", {"type": "message_start", "message": {
            "id": msg_id, "type": "message", "role": "assistant", "model": model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": dict(usage, output_tokens=1)}})
        for i, b in enumerate(blocks):
            if b["type"] == "text":
                self.sse("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": {"type": "text", "text": ""}})
                self.sse("ping", {"type": "ping"})
                for piece in chunks(b["text"]):
                    self.sse("content_block_delta", {"type": "content_block_delta", "index": i,
                                                     "delta": {"type": "text_delta", "text": piece}})
            else:
                self.sse("content_block_start", {"type": "content_block_start", "index": i,
                                                 "content_block": dict(b, input={})})
                for piece in chunks(json.dumps(b["input"])):
                    self.sse("content_block_delta", {
                        "type": "content_block_delta", "index": i,
                        "delta": {"type": "input_json_delta", "partial_json": piece}})
            self.sse("content_block_stop", {"type": "content_block_stop", "index": i})
        self.sse("message_delta", {"type": "message_delta",
                                   "delta": {"stop_reason": stop, "stop_sequence": None},
                                   "usage": {"output_tokens": tout}})
        self.sse("message_stop", {"type": "message_stop"})

    # ---- OpenAI Responses ---------------------------------------------------------

    def openai(self, turn, _side):
        model = self.body_get("model") or "gpt-scripted"
        resp_id = new_id("resp_")
        tin, tout = usage_of(turn)
        items = []
        if turn.get("text"):
            items.append({"type": "message", "id": new_id("msg_"), "role": "assistant",
                          "status": "completed",
                          "content": [{"type": "output_text", "text": turn["text"],
                                       "annotations": []}]})
        for t in turn.get("tools") or []:
            args = t.get("input", {})
            items.append({"type": "function_call", "id": new_id("fc_"),
                          "call_id": new_id("call_"), "name": t["name"], "status": "completed",
                          "arguments": args if isinstance(args, str) else json.dumps(args)})
        response = {"id": resp_id, "object": "response", "created_at": int(time.time()),
                    "model": model, "status": "in_progress", "output": []}
        self.start_sse()
        self.sse("response.created", {"type": "response.created", "response": response})
        for n, item in enumerate(items):
            self.sse("response.output_item.added", {"type": "response.output_item.added",
                                                    "output_index": n, "item": item})
            if item["type"] == "message":
                for piece in chunks(item["content"][0]["text"]):
                    self.sse("response.output_text.delta", {
                        "type": "response.output_text.delta", "item_id": item["id"],
                        "output_index": n, "content_index": 0, "delta": piece})
            self.sse("response.output_item.done", {"type": "response.output_item.done",
                                                   "output_index": n, "item": item})
        done = dict(response, status="completed", output=items, usage={
            "input_tokens": tin, "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": tout, "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": tin + tout})
        self.sse("response.completed", {"type": "response.completed", "response": done})

    # ---- Gemini -------------------------------------------------------------------

    def gemini(self, turn, _side, stream, sse, model):
        tin, tout = usage_of(turn)
        parts = []
        if turn.get("text"):
            parts.append({"text": turn["text"]})
        for t in turn.get("tools") or []:
            parts.append({"functionCall": {"name": t["name"], "args": t.get("input", {})}})
        usage = {"promptTokenCount": tin, "candidatesTokenCount": tout,
                 "totalTokenCount": tin + tout}
        chunk = {"candidates": [{"content": {"role": "model", "parts": parts},
                                 "finishReason": "STOP", "index": 0}],
                 "usageMetadata": usage, "modelVersion": model}
        if not stream:
            return self.send_json(200, chunk)
        if not sse:
            return self.send_json(200, [chunk])
        self.start_sse()
        self.sse(None, chunk)


def text_of(content):
    """The text in a message's content: a string, or the text of its blocks or parts."""
    if isinstance(content, str):
        return content
    if isinstance(content, list):
        return "\n".join(text_of(c) for c in content)
    if isinstance(content, dict):
        return content["text"] if isinstance(content.get("text"), str) else ""
    return ""


def chunks(s, size=24):
    return [s[i:i + size] for i in range(0, len(s), size)] or [""]


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--script", required=True)
    ap.add_argument("--record", required=True)
    ap.add_argument("--port-file")
    args = ap.parse_args()
    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    server.script = Script(args.script)
    server.recorder = Recorder(args.record)
    port = server.server_address[1]
    if args.port_file:
        tmp = args.port_file + ".tmp"
        with open(tmp, "w") as f:
            f.write(str(port))
        os.replace(tmp, args.port_file)
    print(f"listening 127.0.0.1:{port}", flush=True)
    try:
        server.serve_forever(poll_interval=0.2)
    except KeyboardInterrupt:
        pass


if __name__ == "__main__":
    sys.exit(main())
