"""Deterministic conversation generator for the chat-template oracle test."""
import copy
import json
import random

TEXTS = [
    "Hello!", "What's the weather like in Paris today?", "  padded with spaces \n",
    "Line one\nLine two\n\nLine four", "Unicode: héllo wörld, 日本語のテキスト, emoji 🙂👍🏽 and 👨‍👩‍👧",
    'Quotes: "double" and \'single\' and `back`', "Backslashes \\n \\t \\\\ are literal",
    "Tabs\tand\r\nCRLF", "Special tokens inside: <|im_start|> <s> </s> [INST] <start_of_turn>",
    "{{ not a template }} {% neither %}", "Русский текст и العربية", "1 + 1 = 2; 3.14159; -0.5e-3",
    "", " ", "<think>\nI should think.\n</think>\n\nThe answer is 42.", "Short", "x" * 300,
    "Code:\n```python\ndef f(x):\n    return x * 2\n```", "Emoji only 🎉🎉", "trailing newline\n",
]
SYSTEMS = ["You are a helpful assistant.", "Réponds en français.\nSois bref.", "  system with spaces  ",
           "You are Qwen. 你好", ""]
TOOLS = [
    {"type": "function", "function": {
        "name": "get_weather", "description": "Get the current weather for a city — ☀️",
        "parameters": {"type": "object", "properties": {
            "city": {"type": "string", "description": "City name, e.g. \"Paris\""},
            "unit": {"type": "string", "enum": ["celsius", "fahrenheit"]}},
            "required": ["city"]}}},
    {"type": "function", "function": {
        "name": "search", "description": "Search the web",
        "parameters": {"type": "object", "properties": {
            "query": {"type": "string"}, "limit": {"type": "integer", "minimum": 1, "maximum": 50},
            "threshold": {"type": "number", "default": 0.5, "exclusiveMinimum": 1e-7},
            "big": {"type": "number", "default": 1e20}, "flag": {"type": "boolean", "default": False},
            "tags": {"type": "array", "items": {"type": "string"}}, "opt": {"type": ["string", "null"], "default": None}},
            "required": ["query"]}}},
    {"type": "function", "function": {"name": "no_params", "description": "Takes nothing",
                                      "parameters": {"type": "object", "properties": {}}}},
]


def _content(rng, parts_ok):
    text = rng.choice(TEXTS)
    if parts_ok and rng.random() < 0.2:
        parts = [{"type": "text", "text": text}]
        if rng.random() < 0.5:
            parts.append({"type": "text", "text": rng.choice(TEXTS)})
        if rng.random() < 0.3:
            parts.insert(0, {"type": "image"})
        return parts
    return text


def _tool_call(rng, i, string_args):
    name = rng.choice(["get_weather", "search", "no_params"])
    args = {"get_weather": {"city": rng.choice(["Paris", "東京", "São Paulo"]), "unit": "celsius"},
            "search": {"query": rng.choice(TEXTS[:6]), "limit": rng.randint(1, 9), "threshold": 0.25},
            "no_params": {}}[name]
    return {"id": f"call_{i}", "type": "function",
            "function": {"name": name, "arguments": json.dumps(args, ensure_ascii=False) if string_args else args}}


# What each family's template accepts, so most conversations render (a share
# still exercises rejections: role alternation, content types).
PROFILES = {
    "llama3": dict(parts=True, tools=True, tool_content=[None, "", "Let me check."], string_args=None),
    "llama3_1": dict(parts=True, tools=True, tool_content=["", "Let me check."], string_args=None),
    "qwen3": dict(parts=False, tools=True, tool_content=["", "Let me check."], string_args=None),
    "llama2": dict(parts=False, tools=False, tool_content=[""], string_args=None),
    "gemma3": dict(parts=True, tools=True, tool_content=["", "Let me check."], string_args=None),
    "deepseek_v3": dict(parts=False, tools=True, tool_content=[None], string_args=True),
    "phi3": dict(parts=False, tools=False, tool_content=[""], string_args=None),
    "phi4": dict(parts=False, tools=False, tool_content=[""], string_args=None),
    "phi4_mini": dict(parts=False, tools=True, tool_content=["", "Let me check."], string_args=None),
    "features": dict(parts=True, tools=True, tool_content=[None, "", "Let me check."], string_args=None),
    # gpt-oss reads past reasoning as `thinking` and the effort as `reasoning_effort`.
    "gptoss": dict(parts=False, tools=True, tool_content=["", "Let me check."], string_args=False,
                   reasoning_key="thinking", kwargs=lambda rng: {"reasoning_effort": rng.choice(["low", "high"])}),
}


def make_conversation(rng, idx, profile):
    parts_ok = profile["parts"]
    kind = rng.random()
    if not profile["tools"] and 0.6 <= kind < 0.9:
        kind = rng.random() * 0.6
    msgs = []
    tools = None
    if rng.random() < 0.5:
        msgs.append({"role": "system", "content": rng.choice(SYSTEMS)})
    if kind < 0.6:  # plain alternating multi-turn
        turns = rng.randint(1, 6)
        for t in range(turns):
            msgs.append({"role": "user", "content": _content(rng, parts_ok)})
            if t < turns - 1 or rng.random() < 0.4:
                msgs.append({"role": "assistant", "content": _content(rng, parts_ok and rng.random() < 0.3)})
    elif kind < 0.9:  # tool use
        tools = copy.deepcopy(rng.sample(TOOLS, rng.randint(1, len(TOOLS))))
        msgs.append({"role": "user", "content": rng.choice(TEXTS)})
        string_args = profile["string_args"] if profile["string_args"] is not None else rng.random() < 0.5
        n_calls = rng.randint(1, 3)
        calls = [_tool_call(rng, f"{idx}_{k}", string_args) for k in range(n_calls)]
        content = rng.choice(profile["tool_content"])
        msgs.append({"role": "assistant", "content": content, "tool_calls": calls})
        if "reasoning_key" in profile and rng.random() < 0.5:
            msgs[-1][profile["reasoning_key"]] = "Reasoning: " + rng.choice(TEXTS)
        for c in calls:
            msgs.append({"role": "tool", "tool_call_id": c["id"], "content": rng.choice(
                ['{"temp": 21.5, "sky": "clear"}', "No results.", "Résultat: ✓"])})
        if rng.random() < 0.7:
            msgs.append({"role": "assistant", "content": rng.choice(TEXTS)})
            if rng.random() < 0.5:
                msgs.append({"role": "user", "content": rng.choice(TEXTS)})
    else:  # irregular: consecutive roles, empty list, reasoning content
        for _ in range(rng.randint(1, 4)):
            role = rng.choice(["user", "assistant", "user", "system"])
            m = {"role": role, "content": _content(rng, parts_ok)}
            if role == "assistant" and rng.random() < 0.5:
                m[profile.get("reasoning_key", "reasoning_content")] = "Reasoning: " + rng.choice(TEXTS)
            msgs.append(m)
        if not msgs:
            msgs.append({"role": "user", "content": "hi"})
    conv = {"id": idx, "messages": msgs, "tools": tools,
            "add_generation_prompt": rng.random() < 0.6}
    if rng.random() < 0.2:
        conv["kwargs"] = profile["kwargs"](rng) if "kwargs" in profile else {"enable_thinking": rng.random() < 0.5}
    if tools is None and rng.random() < 0.1:
        conv["tools"] = []
    return conv


# Malformed inputs: jinja2 fails on most of them (TypeError/UndefinedError or
# raise_exception), and Tessera must fail too.
MALFORMED = [
    [],
    [{"role": "user", "content": None}],
    [{"role": "user", "content": 42}],
    [{"role": "user"}],
    [{"role": "system", "content": "s"}, {"role": "assistant", "content": "a"}],
    [{"role": "user", "content": "q"}, {"role": "assistant", "content": None,
      "tool_calls": [{"id": "c", "type": "function", "function": {"name": "f", "arguments": {"a": [1, 2.5]}}}]}],
    [{"role": "user", "content": [{"type": "text", "text": "parts"}]}],
]


def generate(family, count):
    rng = random.Random(f"tessera-chat-{family}")
    convs = [make_conversation(rng, i, PROFILES[family]) for i in range(count)]
    for k, msgs in enumerate(MALFORMED):
        convs.append({"id": count + k, "messages": copy.deepcopy(msgs), "tools": None,
                      "add_generation_prompt": True})
    return convs
