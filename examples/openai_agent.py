"""A plain openai agent with one tool, recorded: the loop is its own, evalkit.record watches.

By hand:   EVALKIT_RUNS=recs python openai_agent.py "What is 17 times 23?"
By evalkit: evalkit run --suite my-suite --out runs/recorded -- python openai_agent.py
The client reads OPENAI_BASE_URL and OPENAI_API_KEY as usual; the key is never recorded.
"""

import json
import os
import sys

from openai import OpenAI

import evalkit.record as record

client = record.wrap_openai(OpenAI())
MODEL = os.environ.get("OPENAI_MODEL", "gpt-4o-mini")
TOOLS = [{"type": "function", "function": {
    "name": "multiply", "description": "a times b",
    "parameters": {"type": "object", "required": ["a", "b"],
                   "properties": {"a": {"type": "number"}, "b": {"type": "number"}}}}}]


@record.tool
def multiply(a: float, b: float) -> float:
    return a * b


objective = sys.argv[1]
with record.mission(objective, suite_key=os.environ.get("MISSION_KEY")) as m:
    messages = [{"role": "user", "content": objective}]
    for _ in range(8):
        reply = client.chat.completions.create(model=MODEL, messages=messages, tools=TOOLS)
        message = reply.choices[0].message
        messages.append(message.model_dump(exclude_none=True))
        if not message.tool_calls:
            m.answer(message.content or "")
            break
        for call in message.tool_calls:
            result = multiply(**json.loads(call.function.arguments))
            messages.append({"role": "tool", "tool_call_id": call.id, "content": str(result)})
