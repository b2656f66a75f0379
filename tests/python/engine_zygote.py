# SPDX-License-Identifier: MIT
"""A fork server for vllm_engine.py. Each engine process of test_vllm.py
imported torch and vLLM anew: about 10 s of CPU an engine, most of the
module's time over its hundred engines. The server imports them once and
forks each engine from there, as vLLM's own "fork" multiprocessing
context forks its workers; the engine then runs vllm_engine.serve() as
`python vllm_engine.py ARGS` would, on the test's pipes and environment.

    python engine_zygote.py SOCKET    # the server (started by Zygote)

Zygote(...).spawn(args, env, stderr) -> Proc: an engine, driven as a
subprocess.Popen is (stdin, stdout, poll, wait, kill), waited on through
a pidfd, since it is the server's child, not the test's. The server dies
with the test's process, and every engine with the server (each also
ends when its stdin closes, as before).
"""
import array
import ctypes
import json
import os
import select
import signal
import socket
import subprocess
import sys
import tempfile
import traceback

HERE = os.path.dirname(os.path.abspath(__file__))
PR_SET_PDEATHSIG = 1


def _die_with_parent():
    ctypes.CDLL(None, use_errno=True).prctl(PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def _reap(*_):
    while True:
        try:
            pid, _ = os.waitpid(-1, os.WNOHANG)
        except ChildProcessError:
            return
        if pid == 0:
            return


def _engine(conn, srv, req, fds):
    """In the forked child: become `python vllm_engine.py ARGS`."""
    code = 1
    try:
        _die_with_parent()
        signal.signal(signal.SIGCHLD, signal.SIG_DFL)
        conn.close()
        srv.close()
        for i, fd in enumerate(fds):  # stdin, stdout, stderr
            os.dup2(fd, i)
            os.close(fd)
        os.environ.clear()
        os.environ.update(req["env"])
        os.chdir(req["cwd"])
        sys.argv = [os.path.join(HERE, "vllm_engine.py")] + req["args"]
        import vllm_engine
        vllm_engine.serve()
        code = 0
    except SystemExit as e:
        code = e.code if isinstance(e.code, int) else 1
    except BaseException:  # noqa: BLE001 - said on the engine's stderr
        traceback.print_exc()
    finally:
        sys.stdout.flush()
        sys.stderr.flush()
        os._exit(code)


def serve(path):
    _die_with_parent()
    import vllm_engine  # noqa: F401 - the imports every engine shares
    signal.signal(signal.SIGCHLD, _reap)
    srv = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    srv.bind(path)
    srv.listen(16)
    print(json.dumps({"ready": True}), flush=True)
    while True:
        conn, _ = srv.accept()
        try:
            msg, anc, _, _ = conn.recvmsg(1 << 20, socket.CMSG_SPACE(3 * 4))
            fds = array.array("i")
            for level, kind, data in anc:
                if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                    fds.frombytes(data[:len(data) - len(data) % 4])
            if not msg or len(fds) != 3:
                for fd in fds:
                    os.close(fd)
                continue
            sys.stdout.flush()
            sys.stderr.flush()
            pid = os.fork()
            if pid == 0:
                _engine(conn, srv, json.loads(msg), list(fds))
            for fd in fds:
                os.close(fd)
            pidfd = os.pidfd_open(pid)
            try:
                conn.sendmsg([json.dumps({"pid": pid}).encode()],
                              [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                                array.array("i", [pidfd]))])
            finally:
                os.close(pidfd)
        finally:
            conn.close()


class Proc:
    """An engine the server forked, driven as a subprocess.Popen is."""

    def __init__(self, pid, pidfd, stdin, stdout):
        self.pid, self._pidfd = pid, pidfd
        self.stdin, self.stdout = stdin, stdout
        self.returncode = None

    def poll(self):
        if self.returncode is None and select.select([self._pidfd], [], [], 0)[0]:
            self.returncode = -1  # gone; its status is the server's
        return self.returncode

    def wait(self, timeout=None):
        if self.returncode is None:
            if not select.select([self._pidfd], [], [], timeout)[0]:
                raise subprocess.TimeoutExpired("engine %d" % self.pid, timeout)
            self.returncode = -1
        return self.returncode

    def kill(self):
        if self.poll() is None:
            signal.pidfd_send_signal(self._pidfd, signal.SIGKILL)

    def __del__(self):
        try:
            os.close(self._pidfd)
        except (OSError, AttributeError):
            pass


class Zygote:
    """The server, started with env (which fixes the engines'
    PYTHONHASHSEED: an engine given another one is not forked from it)."""

    def __init__(self, env):
        self.dir = tempfile.mkdtemp(prefix="kvpool-zygote-")
        self.path = os.path.join(self.dir, "sock")
        self.env = env
        self.log = open(os.path.join(self.dir, "stderr"), "w+")
        self.proc = subprocess.Popen([sys.executable, os.path.abspath(__file__), self.path],
                                     stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                                     stderr=self.log, text=True, env=env)
        line = self.proc.stdout.readline()
        if not line or not json.loads(line).get("ready"):
            self.log.seek(0)
            raise RuntimeError("the engines' fork server did not start:\n" + self.log.read())

    def takes(self, env):
        return env.get("PYTHONHASHSEED") == self.env.get("PYTHONHASHSEED")

    def spawn(self, args, env, stderr):
        """An engine of args (vllm_engine.py's) in env, its stderr into the
        file object stderr."""
        in_r, in_w = os.pipe()
        out_r, out_w = os.pipe()
        s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        try:
            s.connect(self.path)
            s.sendmsg([json.dumps({"args": list(args), "env": dict(env),
                                   "cwd": os.getcwd()}).encode()],
                       [(socket.SOL_SOCKET, socket.SCM_RIGHTS,
                         array.array("i", [in_r, out_w, stderr.fileno()]))])
            msg, anc, _, _ = s.recvmsg(4096, socket.CMSG_SPACE(4))
        finally:
            s.close()
            os.close(in_r)
            os.close(out_w)
        fds = array.array("i")
        for level, kind, data in anc:
            if level == socket.SOL_SOCKET and kind == socket.SCM_RIGHTS:
                fds.frombytes(data[:len(data) - len(data) % 4])
        if not msg or len(fds) != 1:
            os.close(in_w)
            os.close(out_r)
            raise RuntimeError("the engines' fork server did not fork one")
        return Proc(json.loads(msg)["pid"], fds[0], os.fdopen(in_w, "w"),
                    os.fdopen(out_r, "r"))

    def close(self):
        self.proc.kill()
        self.proc.wait()
        self.proc.stdout.close()
        self.log.close()
        subprocess.run(["rm", "-rf", self.dir], check=False)


if __name__ == "__main__":
    serve(sys.argv[1])
