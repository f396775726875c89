"""sjkv.chat: an agent transcript rendered by a chat template into a trajectory's segments.

docs/design/agentic.md section 2. The template is run by jinja2 as transformers runs chat
templates (a sandboxed environment with its trim_blocks/lstrip_blocks, loop controls, the
`{% generation %}` tag, a `tojson` that does not escape HTML or non-ASCII, `raise_exception`,
`strftime_now`), so the text is the one the template's authors tested. Each assistant turn the
reference writes, or whose logged text is scored, is found in the rendering by unique markers
put in its place; the text between turns is given (prefilled, not scored).

This file imports only jinja2 (3.1.2 or newer) and the standard library, so sjkv-replay can
run its text with `python3 -c TEXT REQUEST.json`; `sjkv.chat.render_transcript` is the same
code from Python.

Request (script mode: `python3 chat.py REQUEST.json`, "-" reads stdin), a JSON object:

    {"transcript": "PATH",              the transcript file; SHA-256 of its bytes is recorded
     "chat_template": "TEXT",           the template text (a GGUF's tokenizer.chat_template),
     "chat_template_file": "PATH",      or a template file: exactly one of the two
     "chat_template_source": "gguf",    optional: default "gguf" with chat_template, the file's
                                        base name with chat_template_file
     "assistant_turns": "regenerate",   optional: the kind of an assistant message that has no
                                        "sjkv_turn" (regenerate, answer or given)
     "special_tokens": {"bos_token": "<bos>", "eos_token": "<eos>"}}
                                        optional: render variables, name -> text

Response, one JSON object on stdout (ASCII), exit 0:

    {"segments": [                      stream order: given, scored, given, scored, ...
       {"kind": "given", "text": "..."},                  never empty
       {"kind": "generated", "message": 1, "dropped": ""},
                                        the reference writes message 1's turn; "dropped" is
                                        text the template puts before the content (an empty
                                        think block), left to the model
       {"kind": "answer", "message": 3, "text": "42"},    message 3's content, forced, scored
       ...],                            the last is generated or answer; [] if nothing is scored
     "tail": "...",                     the text after the last scored turn (all the text when
                                        none is): nothing is scored there, so it is not recorded
     "messages": 6,                     the number of messages; "message": 6 is the turn the
                                        generation prompt asks for after the last message
     "provenance": {"transcript_sha256": "<64 hex>", "chat_template_sha256": "<64 hex>",
                    "chat_template_source": "gguf", "template_date": "2026-01-01",
                    "jinja2_version": "3.1.6"}}

Refused, exit 1, one object on stdout:

    {"error": "one line", "kind": "request|jinja2|transcript|template|segments|internal",
     "message": 3}                      the message index, or null; the text names no file
                                        (the caller puts the transcript's name before it)

The transcript (OpenAI chat format): a list of messages, or {"messages": [...], "tools": [...],
"date": "YYYY-MM-DD"} (other keys ignored). A message has "role" (system, user, assistant or
tool) and "content": a string, null (assistant only), or a list of {"type": "text", "text": ...}
parts, joined with "\\n" as OpenAI-compatible servers join them for templates that take text.
An assistant message may have "tool_calls" ([{"id", "type": "function", "function": {"name",
"arguments": JSON text}}], the arguments handed to the template parsed, as servers do, since
templates write them with tojson) and "sjkv_turn": regenerate (the reference writes the turn:
scored; its content and tool calls are not rendered), answer (its logged text is forced and
scored: a needle's answer; no leading or trailing whitespace, which templates trim) or given
(rendered as logged, prefilled, not scored). A tool message has "tool_call_id" and optionally
"name". Other keys go to the template untouched. `strftime_now` gives the transcript's "date"
(default 2026-01-01), so a rendering is reproducible.

Refused, besides malformed input: a template that does not render a scored turn's content
verbatim and once, and one that does not render the history before a scored turn as the prefix
of what follows (a template that rewrites earlier turns, like thinking removal): the model would
be scored on a context no server shows it.
"""
from __future__ import annotations

import sys

if __name__ == "__main__" and sys.path and sys.path[0] == "":
    # Run as `python3 -c TEXT`: the caller's working directory is not a place to import from
    # (a json.py or jinja2.py there would run in its place).
    del sys.path[0]

import datetime  # noqa: E402
import hashlib  # noqa: E402
import json  # noqa: E402
import os  # noqa: E402
import re  # noqa: E402

DEFAULT_DATE = "2026-01-01"
MIN_JINJA2 = (3, 1, 2)
TURN_KINDS = ("regenerate", "answer", "given")
ROLES = ("system", "user", "assistant", "tool")
# Render variables the renderer sets itself; a special token may not take one of these names.
_RESERVED = {"messages", "tools", "documents", "add_generation_prompt", "raise_exception",
             "strftime_now", "namespace", "dict"}


class TranscriptError(ValueError):
    """A refusal: str() is one line; kind and message (an index or None) as in the JSON."""

    def __init__(self, text: str, kind: str = "transcript", message: int | None = None):
        text = " ".join(str(text).split())  # one line, whatever the template's text held
        if message is not None and kind in ("transcript", "segments"):
            text = f"message {message}: {text}"
        super().__init__(text)
        self.kind = kind
        self.message = message


class _TemplateRaised(Exception):
    """raise_exception() from a template (kept apart from jinja2's own errors)."""


# ---- jinja2 --------------------------------------------------------------------------------

def _version_tuple(text: str) -> tuple:
    nums = []
    for part in text.split("."):
        m = re.match(r"\d+", part)
        if not m:
            break
        nums.append(int(m.group()))
    return tuple(nums)


def _jinja():
    try:
        import jinja2
        import jinja2.ext
        import jinja2.sandbox
    except ImportError as e:
        raise TranscriptError(f"jinja2 cannot be imported by {sys.executable} ({e}); "
                              f"install it (pip install jinja2==3.1.6, or Debian's python3-jinja2)",
                              "jinja2") from None
    version = _jinja2_version(jinja2)
    if _version_tuple(version) < MIN_JINJA2:
        raise TranscriptError(f"jinja2 {version} (for {sys.executable}) is older than 3.1.2, the oldest "
                              f"this renderer runs templates with (pip install jinja2==3.1.6)", "jinja2")
    return jinja2


def _jinja2_version(jinja2) -> str:
    # The imported module's own version; the distribution's metadata should __version__ go, as
    # MarkupSafe's is going.
    version = getattr(jinja2, "__version__", None)
    if isinstance(version, str):
        return version
    try:
        from importlib.metadata import version as dist_version
        return dist_version("jinja2")
    except Exception:  # noqa: BLE001: no metadata either
        return "0"


def _environment(jinja2, date: datetime.date):
    """The environment transformers renders chat templates in, with a fixed clock."""

    class GenerationTag(jinja2.ext.Extension):
        # {% generation %}...{% endgeneration %} marks assistant text for training masks; here
        # its body is simply rendered.
        tags = {"generation"}

        def parse(self, parser):
            next(parser.stream)
            return parser.parse_statements(("name:endgeneration",), drop_needle=True)

    class Namespace(jinja2.utils.Namespace):
        # Names starting with "_" could reach Python internals: refused, as transformers does.
        def __init__(*args, **kwargs):
            self, rest = args[0], args[1:]
            attrs = dict(*rest, **kwargs)
            for name in attrs:
                Namespace._check(name)
            jinja2.utils.Namespace.__init__(self, attrs)

        def __setitem__(self, name, value):
            Namespace._check(name)
            jinja2.utils.Namespace.__setitem__(self, name, value)

        @staticmethod
        def _check(name):
            if isinstance(name, str) and name.startswith("_"):
                raise jinja2.exceptions.SecurityError(f"namespace attribute {name!r} starts with '_'")

    class Dict:
        # dict(...) and dict.fromkeys(...) only, not the type itself.
        def __call__(self, *args, **kwargs):
            return dict(*args, **kwargs)

        def fromkeys(self, *args, **kwargs):
            return dict.fromkeys(*args, **kwargs)

    def raise_exception(message):
        raise _TemplateRaised(str(message))

    def tojson(value, ensure_ascii=False, indent=None, separators=None, sort_keys=False):
        # jinja2's own tojson escapes <, >, & and ' for HTML; templates expect plain JSON.
        return json.dumps(value, ensure_ascii=ensure_ascii, indent=indent, separators=separators,
                          sort_keys=sort_keys)

    midnight = datetime.datetime(date.year, date.month, date.day)

    def strftime_now(fmt):
        return midnight.strftime(fmt)

    env = jinja2.sandbox.ImmutableSandboxedEnvironment(
        trim_blocks=True, lstrip_blocks=True, extensions=[GenerationTag, jinja2.ext.loopcontrols])
    env.filters["tojson"] = tojson
    env.globals["raise_exception"] = raise_exception
    env.globals["strftime_now"] = strftime_now
    env.globals["namespace"] = Namespace
    env.globals["dict"] = Dict()
    return env


# ---- the transcript ------------------------------------------------------------------------

def _no_duplicates(pairs):
    out = {}
    for k, v in pairs:
        if k in out:
            raise TranscriptError(f"the transcript has the key {k!r} twice in one object")
        out[k] = v
    return out


def _no_constants(name):
    raise TranscriptError(f"the transcript holds {name}, which is not JSON")


def parse_transcript_text(data: bytes | str):
    """JSON text -> the parsed transcript (strict: no NaN, no duplicate keys, UTF-8)."""
    if isinstance(data, bytes):
        try:
            data = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TranscriptError(f"the transcript is not UTF-8 (byte {e.start})") from None
    if data.startswith("\ufeff"):
        data = data[1:]
    try:
        return json.loads(data, object_pairs_hook=_no_duplicates, parse_constant=_no_constants)
    except json.JSONDecodeError as e:
        raise TranscriptError(f"the transcript is not JSON: line {e.lineno} column {e.colno}: {e.msg}") from None


def _json_type(value):
    return {bool: "a boolean", int: "a number", float: "a number", dict: "an object"}.get(type(value), "a value")


def _text(content, i, what):
    """A content value -> str or None; lists of text parts joined."""
    if content is None or isinstance(content, str):
        return content
    if not isinstance(content, list):
        raise TranscriptError(f"{what} is {_json_type(content)}, not a string, null or a list of "
                              f"text parts", message=i)
    texts = []
    for j, part in enumerate(content):
        if not isinstance(part, dict):
            raise TranscriptError(f"{what} part {j} is not an object", message=i)
        if part.get("type") != "text":
            raise TranscriptError(f"{what} part {j} has type {part.get('type')!r}; only text parts "
                                  f"are supported", message=i)
        if not isinstance(part.get("text"), str):
            raise TranscriptError(f"{what} part {j} has no text string", message=i)
        texts.append(part["text"])
    return "\n".join(texts)


def _tool_calls(calls, i):
    if not isinstance(calls, list):
        raise TranscriptError("tool_calls is not a list", message=i)
    out = []
    for j, call in enumerate(calls):
        where = f"tool_calls[{j}]"
        if not isinstance(call, dict):
            raise TranscriptError(f"{where} is not an object", message=i)
        if call.get("type", "function") != "function":
            raise TranscriptError(f"{where} has type {call.get('type')!r}, not 'function'", message=i)
        if "id" in call and not isinstance(call["id"], str):
            raise TranscriptError(f"{where}.id is not a string", message=i)
        fn = call.get("function")
        if not isinstance(fn, dict) or not isinstance(fn.get("name"), str) or not fn["name"]:
            raise TranscriptError(f"{where}.function has no name", message=i)
        args = fn.get("arguments", {})
        if isinstance(args, str):
            try:
                args = json.loads(args, parse_constant=_no_constants)
            except (json.JSONDecodeError, TranscriptError):
                raise TranscriptError(f"{where}.function.arguments is not JSON text", message=i) from None
        elif not isinstance(args, dict):
            raise TranscriptError(f"{where}.function.arguments is neither JSON text nor an object",
                                  message=i)
        call = dict(call)
        call["function"] = dict(fn, arguments=args)
        out.append(call)
    return out


def _check_unicode(value, i, what="the message"):
    # A lone surrogate (a "\ud800" escape) would not survive the trip to UTF-8.
    try:
        json.dumps(value, ensure_ascii=False).encode("utf-8")
    except UnicodeEncodeError:
        raise TranscriptError(f"{what} holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape)",
                              message=i) from None


def normalize_transcript(transcript, assistant_turns: str = "regenerate"):
    """Checks a parsed transcript; returns (messages, tools, date, kinds), kinds[i] the turn kind
    of assistant message i (None for other roles). Messages are copies with content flattened to
    a string or None and tool-call arguments parsed."""
    if assistant_turns not in TURN_KINDS:
        raise TranscriptError(f"assistant turns {assistant_turns!r} is not one of {', '.join(TURN_KINDS)}",
                              "request")
    tools = None
    date = DEFAULT_DATE
    if isinstance(transcript, dict):
        if "messages" not in transcript:
            raise TranscriptError("the transcript object has no \"messages\"")
        tools = transcript.get("tools")
        if tools is not None:
            if not isinstance(tools, list) or not all(isinstance(t, dict) for t in tools):
                raise TranscriptError("\"tools\" is not a list of objects")
            _check_unicode(tools, None, "\"tools\"")
        date = transcript.get("date", DEFAULT_DATE)
        transcript = transcript["messages"]
    if not isinstance(transcript, list):
        raise TranscriptError("the transcript is neither a list of messages nor an object with \"messages\"")
    if not transcript:
        raise TranscriptError("the transcript has no messages")
    if not isinstance(date, str) or not re.fullmatch(r"\d{4}-\d{2}-\d{2}", date):
        raise TranscriptError(f"\"date\" {date!r} is not YYYY-MM-DD")
    try:
        day = datetime.date.fromisoformat(date)
    except ValueError:
        raise TranscriptError(f"\"date\" {date!r} is not a calendar date") from None

    messages, kinds = [], []
    for i, m in enumerate(transcript):
        if not isinstance(m, dict):
            raise TranscriptError("is not an object", message=i)
        role = m.get("role")
        if role not in ROLES:
            raise TranscriptError(f"role {role!r} is not one of {', '.join(ROLES)}", message=i)
        _check_unicode(m, i)
        m = dict(m)
        m["content"] = _text(m.get("content"), i, "content")
        if m["content"] is None and role != "assistant":
            raise TranscriptError(f"a {role} message has no content", message=i)
        if "tool_calls" in m:
            if role != "assistant":
                raise TranscriptError(f"a {role} message has tool_calls", message=i)
            m["tool_calls"] = _tool_calls(m["tool_calls"], i)
        if role == "tool":
            if not isinstance(m.get("tool_call_id"), str):
                raise TranscriptError("a tool message has no tool_call_id string", message=i)
            if "name" in m and not isinstance(m["name"], str):
                raise TranscriptError("name is not a string", message=i)
        elif "tool_call_id" in m:
            raise TranscriptError(f"a {role} message has tool_call_id", message=i)
        kind = None
        if role == "assistant":
            kind = m.pop("sjkv_turn", assistant_turns)
            if kind not in TURN_KINDS:
                raise TranscriptError(f"sjkv_turn {kind!r} is not one of {', '.join(TURN_KINDS)}", message=i)
            if kind == "answer":
                text = m["content"]
                if not text:
                    raise TranscriptError("an answer turn has no text content", message=i)
                if text != text.strip():
                    raise TranscriptError("an answer turn's text has leading or trailing whitespace, "
                                          "which templates trim", message=i)
        elif "sjkv_turn" in m:
            raise TranscriptError(f"sjkv_turn on a {role} message (assistant messages only)", message=i)
        messages.append(m)
        kinds.append(kind)
    return messages, tools, day, kinds


# ---- rendering into segments ---------------------------------------------------------------

def _marker_stem(texts):
    """A marker stem absent from every input text (a transcript may well mention sjkv's own)."""
    for n in range(1000):
        stem = f"sjkvTurn{n}x"
        if not any(stem in t for t in texts):
            return stem
    raise TranscriptError("no marker text absent from the transcript and the template", "segments")


def render_transcript(transcript, chat_template: str, *, special_tokens: dict | None = None,
                      assistant_turns: str = "regenerate", template_source: str = "gguf") -> dict:
    """The response object of the module docstring, or TranscriptError.

    transcript: JSON text (str or bytes: SHA-256 of its UTF-8 bytes is recorded) or a parsed
    list/dict (SHA-256 of its compact JSON, json.dumps(..., ensure_ascii=False,
    separators=(",", ":"))). chat_template: the template text."""
    raw = None
    if isinstance(transcript, (bytes, str)):
        raw = transcript.encode("utf-8", "surrogatepass") if isinstance(transcript, str) else transcript
        transcript = parse_transcript_text(raw)
    if not isinstance(chat_template, str):
        raise TranscriptError("the chat template is not text", "request")
    special_tokens = dict(special_tokens or {})
    for name, value in special_tokens.items():
        if (not isinstance(name, str) or not name.isidentifier() or name.startswith("_")
                or name in _RESERVED):
            raise TranscriptError(f"special token name {name!r} cannot be a render variable", "request")
        if value is not None and not isinstance(value, str):
            raise TranscriptError(f"special token {name} is not text", "request")
    if not isinstance(template_source, str) or not template_source:
        raise TranscriptError("the template source is not a non-empty string", "request")

    jinja2 = _jinja()
    messages, tools, day, kinds = normalize_transcript(transcript, assistant_turns)
    if raw is None:  # checked: no lone surrogates
        raw = json.dumps(transcript, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
    env = _environment(jinja2, day)
    try:
        template = env.from_string(chat_template)
    except jinja2.TemplateSyntaxError as e:
        raise TranscriptError(f"the chat template does not parse: line {e.lineno}: {e.message}",
                              "template") from None

    # Every assistant turn that is scored is replaced by its markers: a regenerated turn's
    # content by S_k alone (its logged text and tool calls are the model's to write), an
    # answer's by S_k + text + E_k. Given turns are rendered as logged, tool calls included.
    inputs = [chat_template, json.dumps(transcript, ensure_ascii=False)]
    inputs += [v for v in special_tokens.values() if v]
    stem = _marker_stem(inputs)
    start = {k: f"{stem}S{k}x" for k, kind in enumerate(kinds) if kind in ("regenerate", "answer")}
    end = {k: f"{stem}E{k}x" for k, kind in enumerate(kinds) if kind == "answer"}
    marked = []
    for k, m in enumerate(messages):
        if kinds[k] == "regenerate":
            m = {"role": "assistant", "content": start[k]}
        elif kinds[k] == "answer":
            m = dict(m, content=start[k] + m["content"] + end[k])
        marked.append(m)

    def render(msgs, generation_prompt):
        return template.render(messages=msgs, tools=tools, documents=None,
                               add_generation_prompt=generation_prompt, **special_tokens)

    def failure(e, where, index):
        err = (f"the chat template refuses {where}: {e}" if isinstance(e, _TemplateRaised)
               else f"the chat template fails at {where}: {type(e).__name__}: {e}")
        return TranscriptError(err, "template", index)

    final_turn = messages[-1]["role"] != "assistant"
    try:
        full = render(marked, final_turn)
    except Exception as e:  # noqa: BLE001: a template can raise anything
        # Name the first message whose history the template cannot render.
        for i in range(len(marked)):
            try:
                render(marked[:i + 1], False)
            except Exception as e2:  # noqa: BLE001
                raise failure(e2, f"message {i}", i) from None
        last = len(marked) - 1
        raise failure(e, f"the generation prompt after message {last}", last) from None

    _check_markers(full, start, end, stem)
    scored = sorted(start)
    if final_turn:
        scored.append(len(messages))

    segments = []
    cursor = 0
    prev = None  # the previous scored turn, for the empty-piece refusal
    for k in scored:
        if k == len(messages):
            history, s_at = full, len(full)
        else:
            try:
                history = render(marked[:k], True)
            except Exception as e:  # noqa: BLE001
                raise failure(e, f"the generation prompt before message {k}", k) from None
            s_at = full.find(start[k])
        if not full.startswith(history):
            raise TranscriptError("the chat template does not extend the history before this turn by "
                                  "appending (it renders earlier turns differently once later ones follow), "
                                  "so the model would be scored on a context no server shows it",
                                  "segments", k)
        gp_end = len(history)
        if not cursor <= gp_end <= s_at:
            raise TranscriptError("the chat template renders the history before this turn past the "
                                  "turn's own content", "segments", k)
        answer_turn = k < len(messages) and kinds[k] == "answer"
        # Before a forced answer, what the template puts ahead of its content stays given.
        piece = full[cursor:s_at if answer_turn else gp_end]
        if not piece:
            after = f"message {prev}'s turn" if prev is not None else "the start"
            raise TranscriptError(f"the chat template renders nothing between {after} and this turn",
                                  "segments", k)
        segments.append({"kind": "given", "text": piece})
        if answer_turn:
            a = s_at + len(start[k])
            e_at = full.find(end[k], a)
            answer = full[a:e_at]
            if answer != messages[k]["content"]:
                raise TranscriptError("the chat template does not render this answer's text verbatim",
                                      "segments", k)
            segments.append({"kind": "answer", "message": k, "text": answer})
            cursor = e_at + len(end[k])
        else:
            segments.append({"kind": "generated", "message": k, "dropped": full[gp_end:s_at]})
            cursor = s_at + (len(start[k]) if k < len(messages) else 0)
        prev = k

    return {
        "segments": segments,
        "tail": full[cursor:],
        "messages": len(messages),
        "provenance": {
            "transcript_sha256": hashlib.sha256(raw).hexdigest(),
            "chat_template_sha256": hashlib.sha256(chat_template.encode("utf-8")).hexdigest(),
            "chat_template_source": template_source,
            "template_date": day.isoformat(),
            "jinja2_version": _jinja2_version(jinja2),
        },
    }


def _check_markers(full, start, end, stem):
    """Each scored turn's markers rendered once, in message order, and no other marker text."""
    last = -1
    for k in sorted(start):
        for marker in (start[k], end.get(k)):
            if marker is None:
                continue
            n = full.count(marker)
            if n != 1:
                raise TranscriptError(f"the chat template does not render this assistant message's content "
                                      f"verbatim (its marker appears {n} times, not once)", "segments", k)
            at = full.find(marker)
            if at < last:
                raise TranscriptError("the chat template renders this assistant message out of order",
                                      "segments", k)
            last = at
    if full.count(stem) != len(start) + len(end):
        raise TranscriptError(f"the chat template renders the marker text {stem!r} where the transcript has "
                              f"no scored turn", "segments")


# ---- script mode ---------------------------------------------------------------------------

def _read(path, what):
    if not isinstance(path, str) or not path:
        raise TranscriptError(f"the request's {what} is not a path", "request")
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        kind = "transcript" if what == "transcript" else "template"
        raise TranscriptError(f"cannot read {what} {path}: {e.strerror}", kind) from None


def render_request(request: dict) -> dict:
    """The script's work: a request object (module docstring) -> the response object."""
    if not isinstance(request, dict):
        raise TranscriptError("the request is not a JSON object", "request")
    known = {"transcript", "chat_template", "chat_template_file", "chat_template_source",
             "assistant_turns", "special_tokens"}
    unknown = sorted(set(request) - known)
    if unknown:
        raise TranscriptError(f"the request has unknown keys: {', '.join(unknown)}", "request")
    raw = _read(request.get("transcript"), "transcript")
    if ("chat_template" in request) == ("chat_template_file" in request):
        raise TranscriptError("the request needs exactly one of chat_template and chat_template_file", "request")
    if "chat_template" in request:
        text = request["chat_template"]
        source = "gguf"
    else:
        path = request["chat_template_file"]
        data = _read(path, "chat_template_file")
        try:
            text = data.decode("utf-8")
        except UnicodeDecodeError as e:
            raise TranscriptError(f"the chat template {path} is not UTF-8 (byte {e.start})", "template") from None
        source = os.path.basename(path)
    special = request.get("special_tokens")
    if special is not None and not isinstance(special, dict):
        raise TranscriptError("special_tokens is not an object", "request")
    return render_transcript(raw, text, special_tokens=special,
                             assistant_turns=request.get("assistant_turns", "regenerate"),
                             template_source=request.get("chat_template_source", source))


def main(argv) -> int:
    try:
        if len(argv) != 2:
            raise TranscriptError("usage: chat.py REQUEST.json (or - for stdin)", "request")
        try:
            data = sys.stdin.buffer.read() if argv[1] == "-" else open(argv[1], "rb").read()
            request = json.loads(data.decode("utf-8"))
        except (OSError, UnicodeDecodeError, json.JSONDecodeError) as e:
            raise TranscriptError(f"cannot read the request {argv[1]}: {e}", "request") from None
        out = render_request(request)
        code = 0
    except TranscriptError as e:
        out = {"error": str(e), "kind": e.kind, "message": e.message}
        code = 1
    except Exception as e:  # noqa: BLE001: a bug here still answers with one line
        out = {"error": f"internal error: {type(e).__name__}: {e}", "kind": "internal", "message": None}
        code = 1
    # ASCII JSON: whatever the locale, the reader gets valid UTF-8.
    sys.stdout.write(json.dumps(out, ensure_ascii=True) + "\n")
    sys.stdout.flush()
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv))
