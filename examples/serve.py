"""Serves completions from the SavedModel that examples/train_char_lm.py exports.

Loads the SavedModel in this fresh process (no Keras model code, no training
script: only `import tf_flashattn`, which registers the FlashAttn> ops the
graph uses) and answers over plain HTTP on localhost:

    python examples/serve.py --model-dir char_lm_savedmodel --port 8000
    curl 'localhost:8000/complete?prompt=import%20&max_tokens=200'
    curl -X POST localhost:8000/complete \\
         -d '{"prompt": "class ", "max_tokens": 200, "temperature": 0.7, "seed": 1}'

Replies are JSON: {"prompt": ..., "completion": ..., "seconds": ...}. Fields:
`prompt` a string (default "": the completion starts a new line), `max_tokens`
an integer in [0, 2000] (default 200), `temperature` in [0, 100] (default 0.8;
0 = greedy), `seed` an integer (default 0). Anything else gets a 400 naming
the field.
`--prompt TEXT` prints one completion and exits instead of serving.

Each completion is one call of the SavedModel's `generate` endpoint: the
prompt is run once through the model into a KV cache per attention layer, then
one byte per step against the cache (a tf.while_loop in the graph).
"""

import argparse
import json
import sys
import threading
import time
from http.server import BaseHTTPRequestHandler
from http.server import ThreadingHTTPServer
from urllib.parse import parse_qs
from urllib.parse import urlparse

import tensorflow as tf

# Registers the FlashAttn> ops. Without this import, tf.saved_model.load fails
# with "Op type not registered 'FlashAttn>FlashAttention'".
import tf_flashattn  # noqa: F401
from _cli import HelpWithDefaults
from _cli import int_in

MAX_TOKENS = 2000
MAX_BODY = 1 << 20  # bytes of a POST body


def _number(params, name, default, kind, low, high):
    """params[name] (JSON number or query-string text) as `kind` within [low, high], or a
    ValueError naming the field."""
    value = params.get(name, default)
    try:
        if isinstance(value, bool):
            raise ValueError
        if kind is int:
            if isinstance(value, float):
                if not value.is_integer():  # also inf and NaN
                    raise ValueError
            value = int(value)
        else:
            value = float(value)
    except (TypeError, ValueError, OverflowError):
        raise ValueError(f"`{name}` must be {'an integer' if kind is int else 'a number'}; got "
                         f"{params.get(name)!r}") from None
    if not low <= value <= high:  # NaN fails too
        raise ValueError(f"`{name}` must be in [{low}, {high}]; got {value!r}")
    return value


class Completer:
    """Wraps the SavedModel's `generate` endpoint (one call at a time)."""

    def __init__(self, model_dir):
        self._model = tf.saved_model.load(model_dir)
        self._lock = threading.Lock()

    def complete(self, prompt, max_tokens=200, temperature=0.8, seed=0):
        prompt_bytes = prompt.encode("utf-8") or b"\n"  # an empty prompt starts a new line
        with self._lock:
            out = self._model.generate(
                tf.constant(list(prompt_bytes), tf.int32),
                tf.constant(max_tokens, tf.int32),
                tf.constant(float(temperature), tf.float32),
                tf.constant([int(seed), 0], tf.int64),
            )
        return bytes(out.numpy().astype("uint8").tolist()).decode("utf-8", errors="replace")


def make_handler(completer):
    class Handler(BaseHTTPRequestHandler):
        timeout = 10  # seconds without data before a request's socket read gives up

        def _reply(self, status, payload):
            body = json.dumps(payload).encode("utf-8")
            self.send_response(status)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def _complete(self, params):
            try:
                prompt = params.get("prompt", "")
                if not isinstance(prompt, str):
                    raise ValueError(f"`prompt` must be a string; got {prompt!r}")
                max_tokens = _number(params, "max_tokens", 200, int, 0, MAX_TOKENS)
                temperature = _number(params, "temperature", 0.8, float, 0.0, 100.0)
                seed = _number(params, "seed", 0, int, -(2**63), 2**63 - 1)
                start = time.time()
                completion = completer.complete(prompt, max_tokens, temperature, seed)
            except ValueError as e:
                self._reply(400, {"error": str(e)})
                return
            self._reply(
                200,
                {
                    "prompt": prompt,
                    "completion": completion,
                    "seconds": round(time.time() - start, 3),
                },
            )

        def do_GET(self):
            url = urlparse(self.path)
            if url.path == "/complete":
                try:
                    query = {k: v[-1] for k, v in parse_qs(url.query, errors="strict").items()}
                except UnicodeDecodeError as e:
                    self._reply(400, {"error": f"query string is not UTF-8: {e}"})
                    return
                self._complete(query)
            elif url.path == "/":
                self._reply(
                    200,
                    {
                        "usage": "GET /complete?prompt=...&max_tokens=200&temperature=0.8"
                        "&seed=0, or POST /complete with the same fields as JSON"
                    },
                )
            else:
                self._reply(404, {"error": f"no such path {url.path!r}"})

        def do_POST(self):
            if urlparse(self.path).path != "/complete":
                self._reply(404, {"error": f"no such path {self.path!r}"})
                return
            if self.headers.get("Transfer-Encoding"):
                self._reply(400, {"error": "send the body with a Content-Length, not chunked"})
                return
            try:
                length = int(self.headers.get("Content-Length", 0))
                if not 0 <= length <= MAX_BODY:
                    raise ValueError
            except ValueError:
                self._reply(400, {"error": f"Content-Length must be an integer in [0, {MAX_BODY}]"})
                return
            try:
                params = json.loads(self.rfile.read(length).decode("utf-8") or "{}")
            except (UnicodeDecodeError, ValueError) as e:  # JSONDecodeError is a ValueError
                self._reply(400, {"error": f"body is not UTF-8 JSON: {e}"})
                return
            except TimeoutError:
                self._reply(400, {"error": "body shorter than its Content-Length"})
                return
            if not isinstance(params, dict):
                self._reply(400, {"error": "body must be a JSON object"})
                return
            self._complete(params)

    return Handler


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__, formatter_class=HelpWithDefaults)
    p.add_argument("--model-dir", default="char_lm_savedmodel", help="the exported SavedModel")
    p.add_argument("--host", default="127.0.0.1", help="address to listen on")
    p.add_argument("--port", type=int, default=8000, help="port to listen on (0: any free one)")
    p.add_argument("--prompt", help="print one completion of this prompt and exit")
    p.add_argument("--max-tokens", type=int_in(0, MAX_TOKENS), default=200, help="bytes to generate (with --prompt)")
    p.add_argument("--temperature", type=float, default=0.8, help="sampling temperature (with --prompt)")
    p.add_argument("--seed", type=int, default=0, help="sampling seed (with --prompt)")
    return p.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    completer = Completer(args.model_dir)
    if args.prompt is not None:
        text = completer.complete(args.prompt, args.max_tokens, args.temperature, args.seed)
        print(args.prompt + text)
        return 0
    server = ThreadingHTTPServer((args.host, args.port), make_handler(completer))
    url = f"http://{args.host}:{server.server_address[1]}/complete"
    print(f"serving {args.model_dir} on {url}", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
