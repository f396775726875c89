"""sjkv.chat's rendering environment, its segment algorithm and its refusals, on small
templates written for each case, and the script mode sjkv-replay runs (python3 -c TEXT REQ)."""
import hashlib
import json
import subprocess
import sys

import pytest

from conftest import CHAT_PY

# A plain turn format: <role>content</role>, the generation prompt <assistant>.
PLAIN = ("{%- for m in messages -%}<{{ m.role }}>{{ m.content if m.content else '' }}</{{ m.role }}>"
         "{%- endfor -%}{%- if add_generation_prompt -%}<assistant>{%- endif -%}")


def user(text):
    return {"role": "user", "content": text}


def assistant(text, kind=None):
    m = {"role": "assistant", "content": text}
    if kind:
        m["sjkv_turn"] = kind
    return m


def refused(chat, transcript, template=PLAIN, **kw):
    with pytest.raises(chat.TranscriptError) as e:
        chat.render_transcript(transcript, template, **kw)
    assert "\n" not in str(e.value)
    return e.value


def test_segments_of_each_kind(chat):
    t = [user("q1"), assistant("logged", "regenerate"), user("q2"), assistant("a2", "answer"),
         user("q3"), assistant("seen", "given"), user("q4")]
    out = chat.render_transcript(json.dumps(t), PLAIN)
    assert out["segments"] == [
        {"kind": "given", "text": "<user>q1</user><assistant>"},
        {"kind": "generated", "message": 1, "dropped": ""},
        {"kind": "given", "text": "</assistant><user>q2</user><assistant>"},
        {"kind": "answer", "message": 3, "text": "a2"},
        {"kind": "given", "text": "</assistant><user>q3</user><assistant>seen</assistant><user>q4</user><assistant>"},
        {"kind": "generated", "message": 7, "dropped": ""},
    ]
    assert out["tail"] == "" and out["messages"] == 7


def test_default_kind_and_text_after_the_last_turn(chat):
    t = [user("q1"), assistant("x"), user("q2"), assistant("y", "given")]
    out = chat.render_transcript(t, PLAIN, assistant_turns="regenerate")
    assert [s["kind"] for s in out["segments"]] == ["given", "generated"]
    assert out["tail"] == "</assistant><user>q2</user><assistant>y</assistant>"
    out = chat.render_transcript(t, PLAIN, assistant_turns="given")
    assert out["segments"] == []  # nothing scored: all of it is the tail
    assert out["tail"] == "<user>q1</user><assistant>x</assistant><user>q2</user><assistant>y</assistant>"


def test_text_parts_are_joined_and_other_keys_reach_the_template(chat):
    t = [{"role": "user", "content": [{"type": "text", "text": "a"}, {"type": "text", "text": "b"}],
          "name": "ana", "extra": {"k": 1}}]
    out = chat.render_transcript(t, "{{ messages[0].content }}|{{ messages[0].name }}|{{ messages[0].extra.k }}")
    assert out["segments"][0]["text"] == "a\nb|ana|1"


def test_the_template_text_before_a_regenerated_turns_content_is_dropped(chat):
    # As a template's empty think block: the model writes its own.
    think = PLAIN.replace("<{{ m.role }}>{{", "<{{ m.role }}>{{ '<think></think>' if m.role == 'assistant' else '' }}{{")
    out = chat.render_transcript([user("q"), assistant("a"), user("r")], think)
    assert out["segments"][:3] == [
        {"kind": "given", "text": "<user>q</user><assistant>"},
        {"kind": "generated", "message": 1, "dropped": "<think></think>"},
        {"kind": "given", "text": "</assistant><user>r</user><assistant>"}]
    # Before a forced answer it stays given.
    out = chat.render_transcript([user("q"), assistant("a", "answer")], think)
    assert out["segments"] == [{"kind": "given", "text": "<user>q</user><assistant><think></think>"},
                               {"kind": "answer", "message": 1, "text": "a"}]


def test_a_template_that_rewrites_history_is_refused(chat):
    # Marks the last user message: once a later one follows, the earlier rendering changes.
    latest = ("{%- set ns = namespace(last=-1) -%}{%- for m in messages -%}{%- if m.role == 'user' -%}"
              "{%- set ns.last = loop.index0 -%}{%- endif -%}{%- endfor -%}"
              "{%- for m in messages -%}<{{ m.role }}{{ ' latest' if loop.index0 == ns.last else '' }}>"
              "{{ m.content }}</{{ m.role }}>{%- endfor -%}{%- if add_generation_prompt -%}<assistant>{%- endif -%}")
    t = [user("q1"), assistant("a1", "given"), user("q2"), assistant("a2"), user("q3")]
    e = refused(chat, t, latest)
    assert e.kind == "segments" and e.message == 3
    assert str(e).startswith("message 3: the chat template does not extend the history before this turn by appending")
    # The same for a forced answer: its context must be what a server would have shown.
    t[3] = assistant("a2", "answer")
    assert refused(chat, t, latest).message == 3
    # Nothing scored after the rewriting: fine.
    out = chat.render_transcript([user("q1"), assistant("a1", "given"), user("q2")], latest)
    assert out["segments"][0]["text"] == "<user>q1</user><assistant>a1</assistant><user latest>q2</user><assistant>"


def test_raise_exception_names_the_message(chat):
    strict = ("{%- for m in messages -%}{%- if m.role == 'tool' -%}"
              "{{- raise_exception('Tool messages are not supported\nby this template') -}}"
              "{%- endif -%}{{ m.content }}{%- endfor -%}")
    t = [user("q"), assistant("a", "given"), {"role": "tool", "tool_call_id": "c", "content": "r"}, user("z")]
    e = refused(chat, t, strict)
    assert str(e) == "the chat template refuses message 2: Tool messages are not supported by this template"
    assert e.kind == "template" and e.message == 2


def test_a_template_that_fails_only_with_the_generation_prompt(chat):
    t = ("{% for m in messages %}{{ m.content }}{% endfor %}"
         "{% if add_generation_prompt %}{{ raise_exception('no prompt') }}{% endif %}")
    e = refused(chat, [user("q"), assistant("a", "given"), user("r")], t)
    assert str(e) == "the chat template refuses the generation prompt after message 2: no prompt"
    e = refused(chat, [user("q"), assistant("a"), assistant("b", "given")], t)
    assert str(e) == "the chat template refuses the generation prompt before message 1: no prompt"
    assert e.message == 1


def test_template_errors_and_the_sandbox(chat):
    e = refused(chat, [user("q")], "{% for m in messages %}")
    assert e.kind == "template" and str(e).startswith("the chat template does not parse: line 1: ")
    e = refused(chat, [user("q")], "{{ messages[0].content + 1 }}")
    assert str(e).startswith("the chat template fails at message 0: TypeError: ")
    e = refused(chat, [user("q")], "{{ messages.__class__.__mro__ }}")
    assert e.kind == "template" and "SecurityError" in str(e)
    e = refused(chat, [user("q")], "{% set ns = namespace(_x=1) %}{{ messages[0].content }}")
    assert "SecurityError" in str(e)
    e = refused(chat, [user("q")], "{% set ns = namespace() %}{% set ns._x = 1 %}{{ messages[0].content }}")
    assert "SecurityError" in str(e)
    e = refused(chat, [user("q")], "{% do messages.append(1) %}")  # no do extension either
    assert e.kind == "template"


def test_tojson_keeps_non_ascii_and_html_and_takes_options(chat):
    t = [user("café <b> & ü 中")]
    out = chat.render_transcript(t, "{{ messages[0].content | tojson }}")
    assert out["segments"][0]["text"] == '"café <b> & ü 中"'
    out = chat.render_transcript(t, "{{ {'b': 1, 'a': [2]} | tojson(indent=2, sort_keys=true) }}")
    assert out["segments"][0]["text"] == '{\n  "a": [\n    2\n  ],\n  "b": 1\n}'
    out = chat.render_transcript(t, "{{ messages[0].content | tojson(ensure_ascii=true) }}")
    assert out["segments"][0]["text"] == '"caf\\u00e9 <b> & \\u00fc \\u4e2d"'


def test_strftime_now_is_the_transcripts_date(chat):
    template = "{{ strftime_now('%d %b %Y %H:%M') }}|{{ messages[0].content }}"
    out = chat.render_transcript([user("q")], template)
    assert out["segments"][0]["text"] == "01 Jan 2026 00:00|q"
    assert out["provenance"]["template_date"] == "2026-01-01"
    out = chat.render_transcript({"messages": [user("q")], "date": "2026-12-05"}, template)
    assert out["segments"][0]["text"] == "05 Dec 2026 00:00|q"
    assert out["provenance"]["template_date"] == "2026-12-05"


def test_environment_as_transformers_renders(chat):
    # trim_blocks and lstrip_blocks, loop controls, the generation tag, dict(), special tokens
    template = ("{{ bos_token }}\n  {% for m in messages %}\n    {% if loop.index0 == 1 %}{% continue %}{% endif %}\n"
                "{% generation %}{{ m.content }}{% endgeneration %}\n{% if loop.index0 == 2 %}{% break %}{% endif %}\n"
                "  {% endfor %}\n{{ dict(a=1)['a'] }}{{ tools[0].name if tools else 'none' }}{{ documents is none }}")
    t = {"messages": [user("x"), user("y"), user("z"), user("w")], "tools": [{"name": "t"}]}
    out = chat.render_transcript(t, template, special_tokens={"bos_token": "<s>", "eos_token": "</s>"})
    # every newline after a tag and every indent before one gone; the one after {{ bos_token }} kept
    assert out["segments"][0]["text"] == "<s>\nxz1tTrue"


def test_provenance(chat):
    text = json.dumps([user("q")]).encode()
    out = chat.render_transcript(text, PLAIN, template_source="plain.jinja")
    p = out["provenance"]
    assert p["transcript_sha256"] == hashlib.sha256(text).hexdigest()
    assert p["chat_template_sha256"] == hashlib.sha256(PLAIN.encode()).hexdigest()
    assert p["chat_template_source"] == "plain.jinja"
    assert p["jinja2_version"] == chat._jinja2_version(chat._jinja())
    assert set(p) == {"transcript_sha256", "chat_template_sha256", "chat_template_source", "template_date",
                      "jinja2_version"}


def test_answer_text_with_outer_whitespace_is_refused(chat):
    for text in (" 42", "42\n", "\t42 "):
        e = refused(chat, [user("q"), assistant(text, "answer")])
        assert str(e) == ("message 1: an answer turn's text has leading or trailing whitespace, "
                          "which templates trim")
        assert e.kind == "transcript" and e.message == 1
    assert str(refused(chat, [user("q"), assistant("", "answer")])) == "message 1: an answer turn has no text content"
    # A given turn is rendered as logged: its whitespace is the template's business.
    out = chat.render_transcript([user("q"), assistant(" 42\n", "given"), user("r")], PLAIN)
    assert out["segments"][0]["text"] == "<user>q</user><assistant> 42\n</assistant><user>r</user><assistant>"


def test_marker_text_in_the_transcript_or_template_is_avoided(chat):
    t = [user("sjkvTurn0x sjkvTurn0xS1x"), assistant("a"), user("b")]
    out = chat.render_transcript(t, PLAIN + "{# sjkvTurn1x #}")
    assert out["segments"] == [
        {"kind": "given", "text": "<user>sjkvTurn0x sjkvTurn0xS1x</user><assistant>"},
        {"kind": "generated", "message": 1, "dropped": ""},
        {"kind": "given", "text": "</assistant><user>b</user><assistant>"},
        {"kind": "generated", "message": 3, "dropped": ""}]


@pytest.mark.parametrize("template,count", [
    pytest.param(PLAIN.replace("{{ m.content if m.content else '' }}", "{{ m.content ~ m.content if m.content }}"), 2,
                 id="twice"),
    pytest.param(PLAIN.replace("{{ m.content if m.content else '' }}",
                               "{{ m.content if m.role != 'assistant' else 'x' }}"), 0, id="dropped"),
])
def test_content_not_rendered_once_is_refused(chat, template, count):
    for kind in ("regenerate", "answer"):
        e = refused(chat, [user("q"), assistant("a", kind), user("r")], template)
        assert str(e) == (f"message 1: the chat template does not render this assistant message's content "
                          f"verbatim (its marker appears {count} times, not once)")
        assert e.kind == "segments"


def test_turns_rendered_out_of_order_are_refused(chat):
    backwards = PLAIN.replace("for m in messages", "for m in messages | reverse")
    e = refused(chat, [user("q"), assistant("a"), user("r"), assistant("b", "answer")], backwards)
    assert str(e) == "message 3: the chat template renders this assistant message out of order"


def test_an_answer_not_rendered_verbatim_is_refused(chat):
    upper = PLAIN.replace("{{ m.content if m.content else '' }}", "{{ m.content | replace('a', 'A') }}")
    e = refused(chat, [user("q"), assistant("ab", "answer")], upper)
    assert str(e) == "message 1: the chat template does not render this answer's text verbatim"


def test_an_empty_given_piece_is_refused(chat):
    bare = "{% for m in messages %}{{ m.content }}{% endfor %}"
    e = refused(chat, [assistant("a"), user("q")], bare)
    assert str(e) == "message 0: the chat template renders nothing between the start and this turn"
    e = refused(chat, [user("q"), assistant("a"), assistant("b")], bare)
    assert str(e) == "message 2: the chat template renders nothing between message 1's turn and this turn"


@pytest.mark.parametrize("transcript,text", [
    pytest.param(b"[{\"role\": \"user\", \"content\": \"q\"}", "the transcript is not JSON: line 1 column 34: "
                 "Expecting ',' delimiter", id="not-json"),
    pytest.param(b"\xff[]", "the transcript is not UTF-8 (byte 0)", id="not-utf8"),
    pytest.param(b"[{\"role\": \"user\", \"role\": \"user\", \"content\": \"q\"}]",
                 "the transcript has the key 'role' twice in one object", id="duplicate-key"),
    pytest.param(b"[{\"role\": \"user\", \"content\": NaN}]", "the transcript holds NaN, which is not JSON", id="nan"),
    pytest.param([], "the transcript has no messages", id="empty"),
    pytest.param({"tools": []}, "the transcript object has no \"messages\"", id="no-messages"),
    pytest.param("\"hello\"", "the transcript is neither a list of messages nor an object with \"messages\"",
                 id="string"),
    pytest.param({"messages": [user("q")], "date": "2026-02-30"}, "\"date\" '2026-02-30' is not a calendar date",
                 id="bad-date"),
    pytest.param({"messages": [user("q")], "date": "5 Dec"}, "\"date\" '5 Dec' is not YYYY-MM-DD", id="date-form"),
    pytest.param({"messages": [user("q")], "tools": {}}, "\"tools\" is not a list of objects", id="tools"),
    pytest.param([user("q"), "hi"], "message 1: is not an object", id="not-object"),
    pytest.param([user("q"), {"role": "developer", "content": "x"}],
                 "message 1: role 'developer' is not one of system, user, assistant, tool", id="role"),
    pytest.param([{"role": "user", "content": [{"type": "image_url", "image_url": {"url": "x"}}]}],
                 "message 0: content part 0 has type 'image_url'; only text parts are supported", id="image"),
    pytest.param([{"role": "user", "content": [{"type": "text"}]}], "message 0: content part 0 has no text string",
                 id="part-no-text"),
    pytest.param([{"role": "user", "content": 3}],
                 "message 0: content is a number, not a string, null or a list of text parts", id="content-int"),
    pytest.param([{"role": "user", "content": None}], "message 0: a user message has no content", id="user-null"),
    pytest.param([user("q"), {"role": "assistant", "content": None, "tool_calls": [
        {"type": "function", "function": {"name": "f", "arguments": "{not json"}}]}],
        "message 1: tool_calls[0].function.arguments is not JSON text", id="arguments"),
    pytest.param([user("q"), {"role": "assistant", "content": None, "tool_calls": [{"type": "function", "function": {}}]}],
                 "message 1: tool_calls[0].function has no name", id="no-name"),
    pytest.param([user("q"), {"role": "assistant", "content": None, "tool_calls": {}}],
                 "message 1: tool_calls is not a list", id="calls-object"),
    pytest.param([{"role": "user", "content": "q", "tool_calls": []}], "message 0: a user message has tool_calls",
                 id="user-calls"),
    pytest.param([user("q"), {"role": "tool", "content": "r"}], "message 1: a tool message has no tool_call_id string",
                 id="tool-no-id"),
    pytest.param([{"role": "user", "content": "q", "tool_call_id": "c"}], "message 0: a user message has tool_call_id",
                 id="user-id"),
    pytest.param([{"role": "user", "content": "q", "sjkv_turn": "answer"}],
                 "message 0: sjkv_turn on a user message (assistant messages only)", id="turn-on-user"),
    pytest.param([user("q"), assistant("a", "score")],
                 "message 1: sjkv_turn 'score' is not one of regenerate, answer, given", id="turn-kind"),
    pytest.param([user("q\ud800")], "message 0: the message holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape)",
                 id="surrogate"),
    pytest.param(b'{"messages": [{"role": "user", "content": "q"}], "tools": [{"d": "\\udc00"}]}',
                 "\"tools\" holds a lone UTF-16 surrogate (a \\ud800-\\udfff escape)", id="surrogate-tools"),
])
def test_malformed_transcripts_are_refused(chat, transcript, text):
    e = refused(chat, transcript)
    assert str(e) == text
    assert e.kind == "transcript"


def test_request_refusals(chat):
    assert refused(chat, [user("q")], assistant_turns="all").kind == "request"
    assert refused(chat, [user("q")], special_tokens={"messages": "x"}).kind == "request"
    assert refused(chat, [user("q")], special_tokens={"bos_token": 1}).kind == "request"


def test_old_jinja2_is_refused(chat, monkeypatch):
    monkeypatch.setattr(chat, "_jinja2_version", lambda jinja2: "3.1.1")
    e = refused(chat, [user("q")])
    assert e.kind == "jinja2" and "jinja2 3.1.1" in str(e) and "older than 3.1.2" in str(e)
    monkeypatch.setattr(chat, "_jinja2_version", lambda jinja2: "3.10.0")
    assert chat.render_transcript([user("q")], PLAIN)["segments"][0]["text"] == "<user>q</user><assistant>"


# ---- script mode, as sjkv-replay runs it ---------------------------------------------------

def run_script(request, tmp_path, as_text=True, cwd=None):
    req = tmp_path / "request.json"
    req.write_text(json.dumps(request))
    with open(CHAT_PY, encoding="utf-8") as f:
        code = f.read()
    argv = [sys.executable, "-c", code, str(req)] if as_text else [sys.executable, CHAT_PY, str(req)]
    p = subprocess.run(argv, capture_output=True, timeout=60, cwd=cwd)
    assert p.stdout.endswith(b"\n") and p.stdout.count(b"\n") == 1
    p.stdout.decode("ascii")  # ASCII whatever the transcript holds
    return p.returncode, json.loads(p.stdout)


@pytest.mark.parametrize("as_text", [True, False], ids=["python-c", "file"])
def test_script_mode(chat, tmp_path, gemma_template, as_text):
    transcript = tmp_path / "t.json"
    data = json.dumps({"messages": [user("Zürich?"), assistant("Ja.", "answer")], "date": "2026-02-03"},
                      ensure_ascii=False).encode()
    transcript.write_bytes(data)
    template = tmp_path / "gemma3-turns.jinja"
    template.write_text(gemma_template, encoding="utf-8")
    rc, out = run_script({"transcript": str(transcript), "chat_template_file": str(template),
                          "special_tokens": {"bos_token": "<bos>"}}, tmp_path, as_text)
    assert rc == 0, out
    assert out == chat.render_transcript(data, gemma_template, special_tokens={"bos_token": "<bos>"},
                                         template_source="gemma3-turns.jinja")
    assert out["segments"][0]["text"] == "<bos><start_of_turn>user\nZürich?<end_of_turn>\n<start_of_turn>model\n"
    assert out["provenance"]["transcript_sha256"] == hashlib.sha256(data).hexdigest()

    rc, out = run_script({"transcript": str(transcript), "chat_template": PLAIN}, tmp_path, as_text)
    assert rc == 0 and out["provenance"]["chat_template_source"] == "gguf"
    assert out["segments"][0]["text"] == "<user>Zürich?</user><assistant>"


def test_script_mode_refusals(tmp_path):
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([user("q"), assistant(" a", "answer")]))
    rc, out = run_script({"transcript": str(transcript), "chat_template": PLAIN}, tmp_path)
    assert rc == 1
    assert out == {"error": "message 1: an answer turn's text has leading or trailing whitespace, which templates trim",
                   "kind": "transcript", "message": 1}
    good = tmp_path / "good.json"
    good.write_text(json.dumps([user("q")]))
    rc, out = run_script({"transcript": str(good), "chat_template": "{% if %}"}, tmp_path)
    assert rc == 1 and out["kind"] == "template" and out["message"] is None
    rc, out = run_script({"transcript": str(tmp_path / "missing.json"), "chat_template": PLAIN}, tmp_path)
    assert rc == 1 and out["kind"] == "transcript"
    assert out["error"].startswith("cannot read transcript ") and "missing.json" in out["error"]
    rc, out = run_script({"transcript": str(transcript)}, tmp_path)
    assert rc == 1 and out["kind"] == "request"
    rc, out = run_script({"transcript": str(transcript), "chat_template": PLAIN, "chat_template_file": "x"}, tmp_path)
    assert rc == 1 and out["kind"] == "request"
    rc, out = run_script({"transcript": str(transcript), "chat_template": PLAIN, "templat": 1}, tmp_path)
    assert rc == 1 and out == {"error": "the request has unknown keys: templat", "kind": "request", "message": None}
    rc, out = run_script([1], tmp_path)
    assert rc == 1 and out["kind"] == "request"


def test_script_mode_does_not_import_from_the_working_directory(tmp_path):
    work = tmp_path / "work"
    work.mkdir()
    for name in ("json", "jinja2", "re"):
        (work / f"{name}.py").write_text("raise SystemExit('imported from the working directory')\n")
    transcript = tmp_path / "t.json"
    transcript.write_text(json.dumps([user("q")]))
    rc, out = run_script({"transcript": str(transcript), "chat_template": PLAIN}, tmp_path, cwd=work)
    assert rc == 0 and out["segments"][0]["text"] == "<user>q</user><assistant>"
