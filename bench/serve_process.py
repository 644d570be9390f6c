"""`undercurrent serve` as a child process, for the benchmark scripts that load it.

ServeProcess(binary, model, extra) starts `BINARY serve --model MODEL --port 0 EXTRA...`, waits
for its "listening on http://HOST:PORT" line (raising RuntimeError if it exits first), and keeps
reading its output on a daemon thread (into `log`) so it never blocks on a full pipe. `url` is
http://HOST:PORT, `port` the port, `pid` its process id; stop() sends SIGTERM and returns the
exit code, waiting up to `timeout` seconds.
"""
import re
import signal
import subprocess
import threading


class ServeProcess:
    def __init__(self, binary, model, extra=()):
        cmd = [binary, "serve", "--model", model, "--port", "0"] + list(extra)
        self.proc = subprocess.Popen(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT,
                                     text=True)
        self.log = []
        for line in self.proc.stdout:
            self.log.append(line)
            m = re.search(r"listening on http://([^:\s]+):(\d+)", line)
            if m:
                self.url = f"http://{m.group(1)}:{m.group(2)}"
                self.port = int(m.group(2))
                break
        else:
            raise RuntimeError("undercurrent serve did not start:\n" + "".join(self.log[-20:]))
        threading.Thread(target=lambda: self.log.extend(self.proc.stdout), daemon=True).start()

    @property
    def pid(self):
        return self.proc.pid

    def stop(self, timeout=120):
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout=timeout)
