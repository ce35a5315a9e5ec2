"""Renders chat templates with Python's jinja2 exactly as HF transformers does
(transformers/utils/chat_template_utils.py: _compile_jinja_template and
apply_chat_template). This is the oracle; it never calls Tessera code."""
import json
from datetime import datetime, timezone

import jinja2
from jinja2 import nodes
from jinja2.ext import Extension, loopcontrols
from jinja2.sandbox import ImmutableSandboxedEnvironment

SPECIAL_TOKEN_ATTRS = ["bos_token", "eos_token", "unk_token", "sep_token", "pad_token",
                       "cls_token", "mask_token", "additional_special_tokens"]


class AssistantTracker(Extension):
    """HF's {% generation %} block; renders its body unchanged."""
    tags = {"generation"}

    def parse(self, parser):
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(["name:endgeneration"], drop_needle=True)
        return nodes.CallBlock(self.call_method("_render", []), [], [], body).set_lineno(lineno)

    def _render(self, caller):
        return caller()


def compile_template(source, now_unix):
    def raise_exception(message):
        raise jinja2.exceptions.TemplateError(message)

    def tojson(x, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        return json.dumps(x, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    def strftime_now(fmt):
        return datetime.fromtimestamp(now_unix, tz=timezone.utc).strftime(fmt)

    env = ImmutableSandboxedEnvironment(trim_blocks=True, lstrip_blocks=True,
                                        extensions=[AssistantTracker, loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    return env.from_string(source)


def special_tokens_map(config):
    """HF's tokenizer.special_tokens_map: set, non-empty attributes as strings."""
    out = {}
    for attr in SPECIAL_TOKEN_ATTRS:
        v = config.get(attr)
        if attr == "additional_special_tokens":
            if v:
                out[attr] = [t["content"] if isinstance(t, dict) else t for t in v]
            continue
        if isinstance(v, dict):
            v = v.get("content")
        if v:
            out[attr] = v
    return out


def render(template, config, conv):
    """Returns ("ok", text) or ("raise", message) or ("error", description)."""
    kwargs = {**special_tokens_map(config), **conv.get("kwargs", {})}
    try:
        text = template.render(messages=conv["messages"], tools=conv.get("tools"), documents=None,
                               add_generation_prompt=conv.get("add_generation_prompt", False),
                               **kwargs)
        return "ok", text
    except jinja2.exceptions.TemplateError as e:
        if type(e) is jinja2.exceptions.TemplateError:
            return "raise", str(e)
        return "error", f"{type(e).__name__}: {e}"
    except Exception as e:  # TypeError etc. from Python operators
        return "error", f"{type(e).__name__}: {e}"
