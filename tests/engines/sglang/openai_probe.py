"""SGLang's OpenAI endpoints with routed experts, on a server that has a
tokenizer (openai.sh starts it; the harness's servers run with
--skip-tokenizer-init, where these endpoints answer 500, see drive.py).

    python openai_probe.py tokenizer MODEL_DIR OUT_DIR
        copies the model to OUT_DIR and adds a word-level tokenizer of its
        512 ids ("t0" .. "t511", split on spaces) and a chat template
    python openai_probe.py probe URL ANSWERS_DIR [FIXTURES_DIR]
        sends /v1/completions and /v1/chat/completions, whole and streamed,
        with return_routed_experts, and saves what comes back; prints where
        the rows and the counts are

The rows are checked against /generate's for the same prompt tokens.
"""

import base64
import http.client
import json
import os
import shutil
import sys
from urllib.parse import urlsplit

VOCAB = 512
CHAT_TEMPLATE = "{% for m in messages %}{{ m['content'] }} {% endfor %}{% if add_generation_prompt %}t3{% endif %}"


def make_tokenizer(model_dir, out_dir):
    from tokenizers import Tokenizer, models, pre_tokenizers
    from transformers import PreTrainedTokenizerFast

    os.makedirs(out_dir, exist_ok=True)
    for name in os.listdir(model_dir):
        shutil.copy(os.path.join(model_dir, name), out_dir)
    vocab = {f"t{i}": i for i in range(VOCAB)}
    tok = Tokenizer(models.WordLevel(vocab=vocab, unk_token="t0"))
    tok.pre_tokenizer = pre_tokenizers.WhitespaceSplit()
    fast = PreTrainedTokenizerFast(tokenizer_object=tok, unk_token="t0", pad_token="t0", bos_token="t1", eos_token="t2")
    fast.chat_template = CHAT_TEMPLATE
    fast.save_pretrained(out_dir)
    print(f"tokenizer of {VOCAB} words written to {out_dir}")


def post(url, path, body):
    u = urlsplit(url)
    conn = http.client.HTTPConnection(u.hostname, u.port, timeout=120)
    conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json"})
    r = conn.getresponse()
    data = r.read()
    conn.close()
    return r.status, data


def events(raw):
    return [b[len("data: "):] for b in raw.decode().split("\n\n") if b.strip()]


def probe(url, answers, fixtures=None):
    dirs = [answers] + ([fixtures] if fixtures else [])
    for d in dirs:
        os.makedirs(d, exist_ok=True)

    def save(name, data):
        for d in dirs:
            with open(os.path.join(d, name), "wb") as f:
                f.write(data if isinstance(data, bytes) else data.encode())

    ids = [17, 300, 42, 99, 5, 260, 77, 140]
    words = " ".join(f"t{i}" for i in ids)
    n_new = 5
    sampling = {"max_tokens": n_new, "temperature": 0, "ignore_eos": True, "return_routed_experts": True}
    # The truth: /generate on the same tokens.
    status, gen = post(url, "/generate", {"input_ids": ids, "sampling_params": {"max_new_tokens": n_new, "temperature": 0, "ignore_eos": True}, "return_routed_experts": True})
    truth = json.loads(gen)["meta_info"]["routed_experts"]
    report = []
    tries = {
        "completions": ("/v1/completions", {"model": "m", "prompt": ids, **sampling}),
        "completions_stream": ("/v1/completions", {"model": "m", "prompt": ids, **sampling, "stream": True, "stream_options": {"include_usage": True}}),
        "chat": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": words}], **sampling}),
        "chat_stream": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": words}], **sampling, "stream": True, "stream_options": {"include_usage": True}}),
        "chat_stream_no_usage": ("/v1/chat/completions", {"model": "m", "messages": [{"role": "user", "content": words}], **sampling, "stream": True}),
    }
    for name, (path, body) in tries.items():
        status, raw = post(url, path, body)
        save(f"openai_{name}_request.json", json.dumps(body, indent=1) + "\n")
        if body.get("stream"):
            save(f"openai_{name}.sse", raw)
            evs = events(raw)
            lines = []
            for i, e in enumerate(evs):
                if e == "[DONE]":
                    lines.append(f"    event {i}: [DONE]")
                    continue
                j = json.loads(e)
                rows = (j.get("sglext") or {}).get("routed_experts")
                lines.append(f"    event {i}: keys {sorted(j)}; choices {len(j.get('choices') or [])}"
                             f"{'; sglext.routed_experts ' + str(len(base64.b64decode(rows)) // 24) + ' rows' if rows else ''}"
                             f"{'; usage ' + json.dumps(j['usage']) if j.get('usage') else ''}"
                             f"{'; sglext keys ' + str(sorted(j['sglext'])) if j.get('sglext') else ''}")
            report.append(f"{name}: HTTP {status}, {len(evs)} events\n" + "\n".join(lines))
        else:
            save(f"openai_{name}.json", raw)
            j = json.loads(raw)
            rows = (j.get("sglext") or {}).get("routed_experts")
            report.append(f"{name}: HTTP {status}; keys {sorted(j)}; usage {json.dumps(j.get('usage'))}; "
                          f"sglext keys {sorted(j.get('sglext') or {})}; rows {len(base64.b64decode(rows)) // 24 if rows else None}"
                          f"{' (equal to /generate on the same tokens)' if rows == truth else ' (not /generate rows: chat adds template tokens)' if rows else ''}")
    text = "\n".join(report)
    print(text)
    save("openai_with_tokenizer.txt", f"/generate on the same prompt tokens: {len(base64.b64decode(truth)) // 24} rows\n" + text + "\n")


if __name__ == "__main__":
    if sys.argv[1] == "tokenizer":
        make_tokenizer(sys.argv[2], sys.argv[3])
    else:
        probe(sys.argv[2], sys.argv[3], sys.argv[4] if len(sys.argv) > 4 else None)
