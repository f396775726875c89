"""sjkv.chat on real templates: SmolLM2's own ChatML template (read from its GGUF) and the
project's Gemma template (data/templates/gemma3-turns.jinja), on the study's agent histories
(study/histories) turned back into transcripts. Rendered as given, a history comes back byte
for byte; with every assistant turn regenerated or forced, the given pieces are the history cut
around the assistant's text, and the answers are that text."""
import glob
import json
import os
import re

import pytest

from conftest import SRC

HISTORIES = os.path.join(SRC, "study", "histories")
BOS = "<bos>"


def chatml_history(text):
    """A ChatML history -> (messages, [(start, end)] of each assistant content). It ends with
    an open assistant turn, the one the generation prompt asks for."""
    messages, spans = [], []
    for m in re.finditer(r"<\|im_start\|>(\w+)\n(.*?)<\|im_end\|>\n", text, re.S):
        messages.append({"role": m.group(1), "content": m.group(2)})
        if m.group(1) == "assistant":
            spans.append((m.start(2), m.end(2)))
    assert text.endswith("<|im_start|>assistant\n")
    return messages, spans


def gemma_history(text):
    """A Gemma-format agent history -> (messages, spans), tool results as tool messages."""
    messages, spans = [], []
    for m in re.finditer(r"<start_of_turn>(user|model)\n(.*?)<end_of_turn>\n", text, re.S):
        role, body = m.group(1), m.group(2)
        if role == "model":
            messages.append({"role": "assistant", "content": body})
            spans.append((m.start(2), m.end(2)))
        elif body.startswith("<tool_result>\n") and body.endswith("\n</tool_result>"):
            messages.append({"role": "tool", "tool_call_id": f"call{len(messages)}",
                             "content": body[len("<tool_result>\n"):-len("\n</tool_result>")]})
        else:
            messages.append({"role": "user", "content": body})
    assert text.endswith("<start_of_turn>model\n")
    return messages, spans


def histories(prefix_re):
    out = []
    for path in sorted(glob.glob(os.path.join(HISTORIES, "*.txt"))):
        with open(path, encoding="utf-8") as f:
            text = f.read()
        if re.match(prefix_re, text) and "<tool_result>" in text:
            out.append(pytest.param(text, id=os.path.basename(path)))
    assert out, f"no histories matching {prefix_re} in {HISTORIES}"
    return out


def with_kind(messages, kind):
    return [dict(m, sjkv_turn=kind) if m["role"] == "assistant" else m for m in messages]


def check_history(chat, template, text, messages, spans, bos=""):
    special = {"bos_token": BOS} if bos else {}
    n = len(messages)

    # Given: the rendering is the history (and the turn the generation prompt opens).
    out = chat.render_transcript(json.dumps(with_kind(messages, "given")), template, special_tokens=special)
    assert out["segments"][0] == {"kind": "given", "text": bos + text}
    assert out["segments"][1] == {"kind": "generated", "message": n, "dropped": ""}
    assert len(out["segments"]) == 2 and out["tail"] == ""

    # Regenerated: the given pieces are the history cut around each assistant's text.
    out = chat.render_transcript(json.dumps(with_kind(messages, "regenerate")), template, special_tokens=special)
    cuts = [0] + [i for s in spans for i in s] + [len(text)]
    pieces = [text[cuts[i]:cuts[i + 1]] for i in range(0, len(cuts), 2)]
    pieces[0] = bos + pieces[0]
    assistants = [i for i, m in enumerate(messages) if m["role"] == "assistant"] + [n]
    expect = []
    for piece, k in zip(pieces, assistants):
        expect += [{"kind": "given", "text": piece}, {"kind": "generated", "message": k, "dropped": ""}]
    assert out["segments"] == expect
    assert out["tail"] == ""

    # Answers: given pieces and answers put back together are the history.
    out = chat.render_transcript(json.dumps(with_kind(messages, "answer")), template, special_tokens=special)
    kinds = [s["kind"] for s in out["segments"]]
    assert kinds == ["given", "answer"] * len(spans) + ["given", "generated"]
    assert "".join(s.get("text", "") for s in out["segments"]) == bos + text
    assert [s["text"] for s in out["segments"] if s["kind"] == "answer"] == [text[a:b] for a, b in spans]


@pytest.mark.parametrize("text", histories(r"<\|im_start\|>system\n"))
def test_smollm2_template_on_the_study_histories(chat, smollm2_template, text):
    messages, spans = chatml_history(text)
    assert len(spans) >= 3
    check_history(chat, smollm2_template, text, messages, spans)


def test_smollm2_template_adds_its_system_turn_and_keeps_tool_roles(chat, smollm2_template):
    transcript = [
        {"role": "user", "content": "List the files."},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c1", "type": "function", "function": {"name": "ls", "arguments": "{}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "a.txt"},
        {"role": "assistant", "content": "a.txt", "sjkv_turn": "answer"},
        {"role": "user", "content": "Thanks."},
    ]
    out = chat.render_transcript(json.dumps(transcript), smollm2_template,
                                 special_tokens={"bos_token": "<|im_start|>", "eos_token": "<|im_end|>"})
    seg = out["segments"]
    assert [s["kind"] for s in seg] == ["given", "generated", "given", "answer", "given", "generated"]
    assert seg[0]["text"].startswith("<|im_start|>system\n")  # the template's default system turn
    assert seg[0]["text"].endswith("<|im_end|>\n<|im_start|>user\nList the files.<|im_end|>\n<|im_start|>assistant\n")
    assert seg[1]["message"] == 1
    assert seg[2]["text"] == "<|im_end|>\n<|im_start|>tool\na.txt<|im_end|>\n<|im_start|>assistant\n"
    assert seg[3] == {"kind": "answer", "message": 3, "text": "a.txt"}
    assert seg[4]["text"] == "<|im_end|>\n<|im_start|>user\nThanks.<|im_end|>\n<|im_start|>assistant\n"
    assert seg[5]["message"] == 5 and out["messages"] == 5
    assert out["provenance"]["chat_template_source"] == "gguf"


@pytest.mark.parametrize("text", histories(r"<start_of_turn>user\n"))
def test_gemma_template_on_the_study_histories(chat, gemma_template, text):
    messages, spans = gemma_history(text)
    assert len(spans) >= 3
    check_history(chat, gemma_template, text, messages, spans, bos=BOS)


GEMMA_TRANSCRIPT = {
    "messages": [
        {"role": "system", "content": "You are BuildBot.\n"},
        {"role": "user", "content": "Why does the build fail?"},
        {"role": "assistant", "content": "Let me look.", "sjkv_turn": "given", "tool_calls": [
            {"id": "c1", "type": "function",
             "function": {"name": "cat", "arguments": "{\"path\": \"/etc/débconf.conf\"}"}}]},
        {"role": "tool", "tool_call_id": "c1", "content": "\n    Config: configdb\n\n"},
        {"role": "user", "content": "And?"},
        {"role": "assistant", "content": None, "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"ls\"}"}},
            {"id": "c3", "type": "function", "function": {"name": "bash", "arguments": "{\"command\": \"id\"}"}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "a"},
        {"role": "tool", "tool_call_id": "c3", "content": "uid=0(root)"},
        {"role": "assistant", "content": "The config database.", "sjkv_turn": "answer"},
    ],
    "tools": [{"type": "function", "function": {"name": "cat", "parameters": {"type": "object"}}}],
}


def test_gemma_template_turns_tools_and_results(chat, gemma_template):
    out = chat.render_transcript(json.dumps(GEMMA_TRANSCRIPT), gemma_template,
                                 special_tokens={"bos_token": "<bos>", "eos_token": "<eos>"},
                                 template_source="gemma3-turns.jinja")
    seg = out["segments"]
    assert seg[0] == {"kind": "given", "text": (
        "<bos><start_of_turn>user\n"
        "You are BuildBot.\n\n"
        "You can call these functions:\n"
        "{\"name\": \"cat\", \"parameters\": {\"type\": \"object\"}}\n"
        "To call a function, write <tool_call>{\"name\": ..., \"arguments\": {...}}</tool_call> on its own "
        "line and stop; the result comes back in the next message.\n\n"
        "Why does the build fail?<end_of_turn>\n"
        "<start_of_turn>model\n"
        "Let me look.\n\n"
        "<tool_call>{\"name\": \"cat\", \"arguments\": {\"path\": \"/etc/débconf.conf\"}}</tool_call><end_of_turn>\n"
        "<start_of_turn>user\n"
        "<tool_result>\n    Config: configdb\n</tool_result>\n"
        "And?<end_of_turn>\n"
        "<start_of_turn>model\n")}
    # A regenerated turn's logged tool calls are the model's to write: not rendered.
    assert seg[1] == {"kind": "generated", "message": 5, "dropped": ""}
    assert seg[2] == {"kind": "given", "text": (
        "<end_of_turn>\n<start_of_turn>user\n"
        "<tool_result>\na\n</tool_result>\n<tool_result>\nuid=0(root)\n</tool_result><end_of_turn>\n"
        "<start_of_turn>model\n")}
    assert seg[3] == {"kind": "answer", "message": 8, "text": "The config database."}
    assert len(seg) == 4 and out["tail"] == "<end_of_turn>\n"
    assert out["provenance"]["chat_template_source"] == "gemma3-turns.jinja"


def test_gemma_template_given_tool_calls_in_order(chat, gemma_template):
    transcript = [
        {"role": "user", "content": "Go."},
        {"role": "assistant", "content": "", "sjkv_turn": "given", "tool_calls": [
            {"id": "c2", "type": "function", "function": {"name": "a", "arguments": "{}"}},
            {"id": "c3", "type": "function", "function": {"name": "b", "arguments": {"x": [1, 2]}}}]},
        {"role": "tool", "tool_call_id": "c2", "content": "1"},
    ]
    out = chat.render_transcript(transcript, gemma_template)
    assert out["segments"][0]["text"] == (
        "<start_of_turn>user\nGo.<end_of_turn>\n<start_of_turn>model\n"
        "<tool_call>{\"name\": \"a\", \"arguments\": {}}</tool_call>\n"
        "<tool_call>{\"name\": \"b\", \"arguments\": {\"x\": [1, 2]}}</tool_call><end_of_turn>\n"
        "<start_of_turn>user\n<tool_result>\n1\n</tool_result><end_of_turn>\n<start_of_turn>model\n")


def test_gemma_template_system_and_tools_alone_open_a_user_turn(chat, gemma_template):
    out = chat.render_transcript([{"role": "system", "content": "Be brief."},
                                  {"role": "assistant", "content": "Hello."}], gemma_template,
                                 special_tokens={"bos_token": "<bos>"})
    assert out["segments"] == [
        {"kind": "given", "text": "<bos><start_of_turn>user\nBe brief.<end_of_turn>\n<start_of_turn>model\n"},
        {"kind": "generated", "message": 1, "dropped": ""}]
    assert out["tail"] == "<end_of_turn>\n"


@pytest.mark.parametrize("messages,text", [
    pytest.param([{"role": "user", "content": "a"}, {"role": "system", "content": "b"}],
                 "the chat template refuses message 1: a system message must be the first message", id="late-system"),
    pytest.param([{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"},
                  {"role": "assistant", "content": "c"}],
                 "the chat template refuses message 2: two assistant messages in a row: Gemma turns alternate",
                 id="two-assistants"),
])
def test_gemma_template_refusals(chat, gemma_template, messages, text):
    with pytest.raises(chat.TranscriptError) as e:
        chat.render_transcript(messages, gemma_template)
    assert str(e.value) == text
    assert e.value.kind == "template"
