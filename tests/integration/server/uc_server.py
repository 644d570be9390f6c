"""`undercurrent serve` as a child process for the Python integration tests (the OpenAI SDK and
structured-output tests): Server(binary, args) starts `BINARY serve --port 0 ARGS...` and waits
up to 300 s for its "listening on" line (RuntimeError with its output otherwise); `url` is the
server's /v1 base URL; stop() sends SIGTERM, collects the rest of the output into `log` and
returns the exit code. smollm2_gguf(): the model the tests serve (UC_SMOLLM2_GGUF); TEMPLATES: the
chat templates in tests/testdata.
"""
import os
import re
import signal
import subprocess
import time

TEMPLATES = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "testdata",
                         "chat_templates")


def smollm2_gguf():
    """UC_SMOLLM2_GGUF, or RuntimeError saying how to get it."""
    gguf = os.environ.get("UC_SMOLLM2_GGUF")
    if not gguf:
        raise RuntimeError("UC_SMOLLM2_GGUF is not set: run scripts/fetch-smollm2.sh and export "
                           "its output")
    return gguf


class Server:
    def __init__(self, binary, args):
        self.proc = subprocess.Popen([binary, "serve", "--port", "0"] + args,
                                     stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        self.log = []
        deadline = time.time() + 300
        while time.time() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            self.log.append(line)
            m = re.search(r"listening on http://([^:\s]+):(\d+)", line)
            if m:
                self.url = f"http://{m.group(1)}:{m.group(2)}/v1"
                return
        raise RuntimeError("server did not start:\n" + "".join(self.log))

    def stop(self):
        self.proc.send_signal(signal.SIGTERM)
        out, _ = self.proc.communicate(timeout=120)
        self.log.append(out)
        return self.proc.returncode
