#!/bin/sh
# sjkv-replay record --transcript on the real models (docs/design/agentic.md section 2; skips
# with 77 when neither is installed): a 3-turn agent transcript (a tool call and its result)
# recorded and scored on SmolLM2 (its GGUF's ChatML template) and on Gemma 3 270M with the
# project's data/templates/gemma3-turns.jinja, short turns; the refusals before any model work
# (one line, the exit code, no file); the BOS rule; tokens --transcript of all-given turns is
# tokens --special of the rendered text.
# Arguments: TOOL SCRATCH SOURCE_DIR PYTHON [BUILD_PYTHON_DIR]
set -eu
tool=$1; dir=$2; src=$3; py=$4; pydir=${5:-}
models=${XDG_CACHE_HOME:-$HOME/.cache}/sjkv/models
gemma=${SJKV_MODEL:-$models/default.gguf}
smol=$(dirname "$gemma")/smollm2.gguf
template=$src/data/templates/gemma3-turns.jinja
if [ ! -f "$gemma" ] && [ ! -f "$smol" ]; then echo "no model at $gemma or $smol (scripts/setup installs them)"; exit 77; fi
rm -rf "$dir"; mkdir -p "$dir"
export SJKV_PYTHON="$py"
# The trajectory checks read the file with the sjkv module when it is built and imports.
inspect=
if [ -n "$pydir" ] && PYTHONPATH="$pydir" "$py" -c "import sjkv" 2>/dev/null; then inspect=1; fi

cat > "$dir/t3.json" <<'EOF'
{"tools": [{"type": "function", "function": {"name": "get_weather", "description": "Current weather of a city",
   "parameters": {"type": "object", "properties": {"city": {"type": "string"}}, "required": ["city"]}}}],
 "messages": [
  {"role": "system", "content": "You are a helpful assistant. Answer in at most five words."},
  {"role": "user", "content": "What is the weather in Paris?"},
  {"role": "assistant", "content": null, "tool_calls": [{"id": "c1", "type": "function",
    "function": {"name": "get_weather", "arguments": "{\"city\": \"Paris\"}"}}]},
  {"role": "tool", "tool_call_id": "c1", "name": "get_weather", "content": "{\"temp_c\": 18, \"sky\": \"cloudy\"}"},
  {"role": "assistant", "content": "It is 18 C and cloudy in Paris."},
  {"role": "user", "content": "Should I take an umbrella? Answer yes or no."}]}
EOF

# The same with a text beside the tool call, for rendering every turn as given (SmolLM2's
# template cannot write a null content).
sed 's/"content": null/"content": "Let me look."/' "$dir/t3.json" > "$dir/t3g.json"

# count FILE: the first field of a tokens line.
count() { cut -f1 "$1"; }

# check_trajectory FILE N_TURNS BOS_ID EOG_ID GIVEN: segments given/generated with idle steps
# between, the provenance, the context, (BOS_ID >= 0) exactly one BOS first, and the EOG cut:
# after a turn the model ended with EOG_ID (its end-of-turn marker) the next given piece does
# not repeat it, so the given tokens are GIVEN (tokens --transcript) less one per such turn.
check_trajectory() {
  [ -n "$inspect" ] || { echo "sjkv module not importable: trajectory contents not checked"; return 0; }
  PYTHONPATH="$pydir" "$py" - "$@" <<'PY'
import sys
import sjkv
path, turns, bos, eog, planned = sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5])
t = sjkv.read_trajectory(path)
kinds = [s[0] for s in t["segments"]]
assert kinds == (["given", "generated", "idle"] * turns)[:-1], kinds
assert all(s[2] == 0 for s in t["segments"]), t["segments"]  # --idle 0, the default
assert len(t["transcript_sha256"]) == 64 and len(t["chat_template_sha256"]) == 64, t
assert t["template_date"] == "2026-01-01" and t["jinja2_version"], t
gens = [s[1] for s in t["segments"] if s[0] == "generated"]
assert all(0 < g <= 24 for g in gens), gens
given = sum(s[1] for s in t["segments"] if s[0] == "given")
toks = [int(x) for x in t["tokens"]]
if bos >= 0:
    assert toks[0] == bos and toks[1] != bos, toks[:3]
at, cuts = 0, 0
for i, (kind, n, _) in enumerate(t["segments"]):
    if kind == "generated" and i + 2 < len(t["segments"]) and toks[at + n - 1] == eog:
        cuts += 1
        assert toks[at + n] != eog, (i, toks[at: at + n + 2])  # the marker is not doubled
    at += n
assert given == planned - cuts, (given, planned, cuts)
assert t["context"] == planned + 24 * turns, (t["context"], planned)
print(path, "segments", t["segments"], "source", t["chat_template_source"], "end-of-turn cuts", cuts)
PY
}

# refuse NAME EXIT PATTERN COMMAND...: exit code, one line on stderr matching PATTERN (and no
# "model ..." line: no weights were loaded), no output file.
refuse() {
  name=$1; code=$2; pattern=$3; shift 3
  set +e
  "$@" > "$dir/$name.out" 2> "$dir/$name.err"
  r=$?
  set -e
  if [ "$r" -ne "$code" ]; then echo "$name: exit $r, expected $code"; cat "$dir/$name.err"; exit 1; fi
  if [ "$(wc -l < "$dir/$name.err")" -ne 1 ]; then echo "$name: not one line:"; cat "$dir/$name.err"; exit 1; fi
  grep -q -- "$pattern" "$dir/$name.err" || { echo "$name: expected /$pattern/:"; cat "$dir/$name.err"; exit 1; }
  if [ -e "$dir/never.h5" ] || [ -e "$dir/never" ]; then echo "$name: left an output behind"; exit 1; fi
}

# render TEMPLATE_FILE BOS_TEXT > TEXT: the given text of t3g.json, all turns given, as chat.py
# renders it (its script mode).
render() {
  "$py" - "$src/python/sjkv/chat.py" "$dir/t3g.json" "$1" "$2" <<'PY'
import json, subprocess, sys
chat, transcript, template, bos = sys.argv[1:5]
req = {"transcript": transcript, "chat_template_file": template, "assistant_turns": "given",
       "special_tokens": {"bos_token": bos} if bos else {}}
out = subprocess.run([sys.executable, chat, "-"], input=json.dumps(req).encode(), capture_output=True, check=True)
r = json.loads(out.stdout)
assert [s["kind"] for s in r["segments"]] == ["given", "generated"], r
sys.stdout.write(r["segments"][0]["text"])
PY
}

if [ -f "$smol" ]; then
  # record, then score: three turns of at most 24 tokens, idle seals between them
  "$tool" record --transcript "$dir/t3.json" --model "$smol" --generate 24 -o "$dir/smol.h5" --threads 2 -q
  "$tool" score "$dir/smol.h5" --model "$smol" --arms f32,f16,q4_0 --out "$dir/smol" --threads 2 -q > /dev/null
  "$tool" tokens --transcript "$dir/t3.json" --model "$smol" --generate 24 > "$dir/smol-plan.tokens"
  check_trajectory "$dir/smol.h5" 3 -1 2 "$(count "$dir/smol-plan.tokens")"  # <|im_end|> is 2
  # run --transcript is record then score: the same rows
  "$tool" run --transcript "$dir/t3.json" --model "$smol" --generate 24 --arms f32,f16,q4_0 --out "$dir/smol-run" \
    --threads 2 -q > /dev/null
  sed 's/^[^,]*,//' "$dir/smol/positions.csv" > "$dir/a.csv"
  sed 's/^[^,]*,//' "$dir/smol-run/positions.csv" > "$dir/b.csv"
  cmp "$dir/a.csv" "$dir/b.csv"
  "$py" - "$dir/smol" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/results.json"))
arms = {a["arm"]: a for a in r["arms"]}
assert arms["f32"]["max_kl"] == 0.0, arms["f32"]          # the reference replayed: exactly 0
assert arms["f16"]["mean_kl"] < 1e-4, arms["f16"]
assert arms["q4_0"]["mean_kl"] > arms["f16"]["mean_kl"], arms
n = r["trajectories"][0]["generated"]
assert 3 <= n <= 72 and all(a["positions"] == n for a in arms.values()), (n, arms)
print("smollm2 transcript ok:", n, "positions", {k: round(v["mean_kl"], 6) for k, v in arms.items()})
PY
  # tokens --transcript with every turn given: tokens --special of the rendered text
  # (SmolLM2 adds no BOS: the template's text stands)
  "$tool" tokens --transcript "$dir/t3g.json" --model "$smol" --assistant-turns given > "$dir/smol.tokens"
  cat > "$dir/chatml.jinja" <<'EOF'
{%- for m in messages -%}
<|im_start|>{{ m['role'] }}
{{ m['content'] or '' }}<|im_end|>
{% endfor -%}
{%- if add_generation_prompt -%}
<|im_start|>assistant
{% endif -%}
EOF
  "$tool" tokens --transcript "$dir/t3g.json" --model "$smol" --assistant-turns given --chat-template "$dir/chatml.jinja" \
    > "$dir/smol-chatml.tokens"
  render "$dir/chatml.jinja" "" > "$dir/smol-chatml.txt"
  "$tool" tokens --special "$dir/smol-chatml.txt" --model "$smol" > "$dir/smol-chatml.special"
  test "$(count "$dir/smol-chatml.tokens")" -eq "$(count "$dir/smol-chatml.special")"
  # the refusals, before any model work
  refuse smol-context 1 "^sjkv-replay: transcript .*t3.json: [0-9,]* given tokens + 3 turns x 20000 = [0-9,]* tokens exceeds smollm2.gguf's training context of 8,192$" \
    "$tool" record --transcript "$dir/t3.json" --model "$smol" --generate 20000 -o "$dir/never.h5"
  refuse smol-run-context 1 "exceeds smollm2.gguf's training context" \
    "$tool" run --transcript "$dir/t3.json" --model "$smol" --generate 20000 --arms f16 --out "$dir/never"
  refuse no-python 2 "^sjkv-replay: \$SJKV_PYTHON ($dir/no-such-python): cannot be run" \
    env SJKV_PYTHON="$dir/no-such-python" "$tool" record --transcript "$dir/t3.json" --model "$smol" -o "$dir/never.h5"
  if ! "$py" -S -c "import jinja2" 2>/dev/null; then
    printf '#!/bin/sh\nexec "%s" -S "$@"\n' "$py" > "$dir/py-no-site"
    chmod +x "$dir/py-no-site"
    refuse no-jinja2 2 "^sjkv-replay: \$SJKV_PYTHON ($dir/py-no-site): jinja2 cannot be imported" \
      env SJKV_PYTHON="$dir/py-no-site" "$tool" record --transcript "$dir/t3.json" --model "$smol" -o "$dir/never.h5"
  fi
  echo '[{"role": "user", "content": "hi"}, {"role": "wizard", "content": "a"}]' > "$dir/bad-role.json"
  refuse bad-role 2 "^sjkv-replay: $dir/bad-role.json: message 1: " \
    "$tool" record --transcript "$dir/bad-role.json" --model "$smol" -o "$dir/never.h5"
  set +e
  "$tool" record --transcript "$dir/t3.json" --prompt-file "$dir/t3.json" --model "$smol" -o "$dir/never.h5" \
    2> "$dir/both.err"
  r=$?
  set -e
  test "$r" -eq 1; grep -q "excludes" "$dir/both.err"; test ! -e "$dir/never.h5"
fi

if [ -f "$gemma" ]; then
  "$tool" record --transcript "$dir/t3.json" --model "$gemma" --chat-template "$template" --generate 24 \
    -o "$dir/gemma.h5" --threads 2 -q
  sj=sj:4/4:staging=q8_0:sink=64:tail=16/128:G=16
  "$tool" score "$dir/gemma.h5" --model "$gemma" --arms "f32,f16,$sj" --out "$dir/gemma" --threads 2 -q > /dev/null
  "$tool" tokens --transcript "$dir/t3.json" --model "$gemma" --chat-template "$template" > "$dir/gemma-plan.tokens"
  check_trajectory "$dir/gemma.h5" 3 2 106 "$(count "$dir/gemma-plan.tokens")"  # <bos> 2, <end_of_turn> 106
  "$py" - "$dir/gemma" "$sj" <<'PY'
import json, sys
r = json.load(open(sys.argv[1] + "/results.json"))
arms = {a["arm"]: a for a in r["arms"]}
assert arms["f32"]["max_kl"] == 0.0, arms["f32"]
assert arms["f16"]["mean_kl"] < 1e-4, arms["f16"]
assert arms[sys.argv[2]]["mean_kl"] > arms["f16"]["mean_kl"], arms
assert "note" not in arms[sys.argv[2]], arms  # the SJ body sealed groups
print("gemma transcript ok:", {k: round(v["mean_kl"], 6) for k, v in arms.items()})
PY
  # The BOS rule (add_bos_token): one BOS first whether the template writes it or not.
  "$tool" tokens --transcript "$dir/t3g.json" --model "$gemma" --chat-template "$template" --assistant-turns given \
    > "$dir/gemma.tokens"
  grep -v "bos_token if" "$template" > "$dir/no-bos.jinja"
  if grep -q "{{- bos_token" "$dir/no-bos.jinja" || ! grep -q "{{- bos_token" "$template"; then echo "no BOS line taken out"; exit 1; fi
  "$tool" tokens --transcript "$dir/t3g.json" --model "$gemma" --chat-template "$dir/no-bos.jinja" --assistant-turns given \
    > "$dir/gemma-no-bos.tokens"
  test "$(count "$dir/gemma.tokens")" -eq "$(count "$dir/gemma-no-bos.tokens")"
  # ... and it is tokens --special of the rendered text, which adds the BOS the text then
  # must not hold: the template's "<bos>" taken off
  render "$template" "<bos>" > "$dir/gemma.txt"
  test "$(head -c 5 "$dir/gemma.txt")" = "<bos>"
  tail -c +6 "$dir/gemma.txt" > "$dir/gemma-nobos.txt"
  "$tool" tokens --special "$dir/gemma-nobos.txt" --model "$gemma" > "$dir/gemma.special"
  test "$(count "$dir/gemma.tokens")" -eq "$(count "$dir/gemma.special")"
  "$tool" tokens --special "$dir/gemma.txt" --model "$gemma" > "$dir/gemma-twice.special"
  test "$(count "$dir/gemma-twice.special")" -eq $(($(count "$dir/gemma.tokens") + 1))
  # refusals: no template in the GGUF, a template that cannot render the transcript
  refuse no-template 1 "^sjkv-replay: $(basename "$gemma") has no chat template (tokenizer.chat_template): pass --chat-template FILE" \
    "$tool" record --transcript "$dir/t3.json" --model "$gemma" -o "$dir/never.h5"
  echo '[{"role": "user", "content": "hi"}, {"role": "assistant", "content": "a"}, {"role": "assistant", "content": "b"}]' \
    > "$dir/two-turns.json"
  refuse cannot-render 2 "^sjkv-replay: $dir/two-turns.json: the chat template refuses message 2: two assistant messages in a row" \
    "$tool" record --transcript "$dir/two-turns.json" --model "$gemma" --chat-template "$template" -o "$dir/never.h5"
  refuse gemma-context 1 "^sjkv-replay: transcript .*: [0-9,]* given tokens + 3 turns x 20000 = [0-9,]* tokens exceeds $(basename "$gemma")'s training context of 32,768$" \
    "$tool" record --transcript "$dir/t3.json" --model "$gemma" --chat-template "$template" --generate 20000 -o "$dir/never.h5"
fi
echo "transcript ok"
