#!/usr/bin/env python3
"""Speaks to a running `tensorfold serve` with the official `openai` Python SDK.

Usage: scripts/openai_sdk_check.py --base-url http://127.0.0.1:8080/v1 [--api-key KEY]

Checks: models, chat (whole and streamed, same tokens), completions, seed reproducibility,
a tool-call round trip (the tool result sent back as a `tool` message), and an error case
(n=2 -> BadRequestError). Exits 1 on the first failure; prints one line per check.
"""

import argparse
import sys

import openai


def check(name, cond, detail=""):
    print(f"{'ok  ' if cond else 'FAIL'} {name}{': ' + str(detail) if detail and not cond else ''}")
    if not cond:
        sys.exit(1)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--base-url", required=True)
    ap.add_argument("--api-key", default="none")
    a = ap.parse_args()
    client = openai.OpenAI(base_url=a.base_url, api_key=a.api_key, max_retries=0)

    models = client.models.list()
    model = models.data[0].id
    check("models.list", len(models.data) == 1, models)

    msgs = [{"role": "user", "content": "What is the capital of France?"}]
    whole = client.chat.completions.create(model=model, messages=msgs, max_tokens=12, temperature=0)
    text = whole.choices[0].message.content
    sha = (whole.model_extra or {}).get("tensorfold", {}).get("token_sha")
    check("chat", bool(text) and whole.usage.completion_tokens > 0 and sha, whole)

    parts, stream_sha, usage = [], None, None
    stream = client.chat.completions.create(
        model=model, messages=msgs, max_tokens=12, temperature=0, stream=True,
        stream_options={"include_usage": True},
    )
    for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            parts.append(chunk.choices[0].delta.content)
        ext = (chunk.model_extra or {}).get("tensorfold")
        if ext:
            stream_sha = ext["token_sha"]
        if chunk.usage:
            usage = chunk.usage
    check("chat stream == whole", "".join(parts) == text and stream_sha == sha, ("".join(parts), text))
    check("stream usage", usage is not None and usage.completion_tokens == whole.usage.completion_tokens)

    comp = client.completions.create(model=model, prompt="The capital of France is", max_tokens=4, temperature=0)
    check("completions", comp.choices[0].text.startswith(" Paris"), comp.choices[0].text)

    def seeded(seed):
        r = client.chat.completions.create(
            model=model, messages=[{"role": "user", "content": "Tell me a story."}],
            max_tokens=16, temperature=1.0, seed=seed,
        )
        return r.model_extra["tensorfold"]["token_sha"]

    check("seed reproduces", seeded(11) == seeded(11))
    check("another seed differs", seeded(11) != seeded(12))

    tools = [{"type": "function", "function": {
        "name": "get_weather", "description": "Current weather in a city",
        "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]},
    }}]
    convo = [
        {"role": "user", "content": "What is the weather in Paris?"},
        {"role": "assistant", "content": None, "tool_calls": [{
            "id": "call_1", "type": "function",
            "function": {"name": "get_weather", "arguments": '{"city": "Paris"}'},
        }]},
        {"role": "tool", "tool_call_id": "call_1", "content": '{"temp_c": 21, "sky": "clear"}'},
    ]
    r = client.chat.completions.create(model=model, messages=convo, tools=tools, max_tokens=24, temperature=0)
    check("tool round trip", r.choices[0].finish_reason in ("stop", "length", "tool_calls"), r)

    try:
        client.chat.completions.create(model=model, messages=msgs, n=2)
        check("n=2 refused", False, "no error")
    except openai.BadRequestError as e:
        check("n=2 refused", e.status_code == 400 and e.body.get("param") == "n", e.body)
    print("openai SDK: all checks passed")


if __name__ == "__main__":
    main()
