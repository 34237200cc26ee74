#!/usr/bin/env python3
"""A client of aria2's JSON-RPC for the tests (RPCTests, RPCOracleTests):
the same calls against `aria2c --enable-rpc` and against syncagent, real
clients nobody here wrote (aria2p's library and CLI), and attacks. Run by
the venv's python; prints one JSON document on stdout.

  script  URL SECRET FILES DIR   the oracle's script of calls (JSON: every answer and notification)
  edges   URL SECRET             the oracle's calls at the edges: what aria2 refuses and how (compared like script's)
  compare A.json B.json          the shapes of two scripts' answers, field by field (one difference a line)
  aria2p  PORT SECRET URL OUT    aria2p's library and CLI against one server
  listen  URL GID                WebSocket notifications of one download, until its end
  flood   URL SECRET CALLS       CALLS calls over WebSockets as fast as they go (the rate bound)
  frames  HOST PORT              malformed WebSocket frames, each on a connection of its own
  calls   URL SECRET JSON        each [method, param…] of JSON, with the token
  request URL JSON               one request body as it is: its HTTP status and answer
  unauthorized|rebinding|huge|malformed  HOST PORT SECRET    an attack each: how it was answered
  connections HOST PORT COUNT    COUNT connections held at once: how many the server kept
  pingflood HOST PORT COUNT      COUNT WebSocket pings from a client that never reads
  slowloris HOST PORT COUNT      COUNT requests sent a header line a second: how many the server closed
  badtokens URL SECRET           calls with the secret while a page floods wrong tokens: how they were answered
  wsslots URL SECRET             64 WebSockets a page opens without the secret: whether others still get in
"""
import base64
import http.client
import json
import os
import socket
import struct
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request

import websocket  # websocket-client, which aria2p brings


def post(url, body, headers=None):
    """(HTTP status, parsed answer) of one POST."""
    request = urllib.request.Request(url, body if isinstance(body, bytes) else json.dumps(body).encode(),
                                     headers=headers or {"Content-Type": "application/json"})
    try:
        with urllib.request.urlopen(request, timeout=20) as answer:
            return answer.status, json.loads(answer.read() or b"null")
    except urllib.error.HTTPError as error:
        text = error.read()
        try:
            return error.code, json.loads(text)
        except ValueError:
            return error.code, text.decode("latin-1")


class Server:
    def __init__(self, url, secret):
        self.url, self.secret = url, secret
        self.steps = []

    def call(self, method, *params, token=True, name=None, record=True):
        body = {"jsonrpc": "2.0", "id": "x", "method": method, "params": ([f"token:{self.secret}"] if token else []) + list(params)}
        status, answer = post(self.url, body)
        if record:
            self.steps.append({"name": name or method, "status": status, "answer": answer})
        return answer.get("result") if isinstance(answer, dict) else None

    def raw(self, name, body):
        status, answer = post(self.url, body.encode() if isinstance(body, str) else json.dumps(body).encode())
        self.steps.append({"name": name, "status": status, "answer": answer})

    def status(self, gid, keys=("status",)):
        return self.call("aria2.tellStatus", gid, list(keys), record=False) or {}

    def wait(self, gid, statuses, seconds=20):
        deadline = time.time() + seconds
        while time.time() < deadline:
            if self.status(gid).get("status") in statuses:
                return True
            time.sleep(0.05)
        raise SystemExit(f"{gid} never became {statuses}: {self.status(gid)}")


class Notifications:
    """Every notification a WebSocket client gets, from connect to close."""

    def __init__(self, url):
        self.socket = websocket.create_connection(url.replace("http://", "ws://"), timeout=20)
        self.received = []
        self.answers = []
        self.thread = threading.Thread(target=self.read, daemon=True)
        self.thread.start()

    def read(self):
        while True:
            try:
                text = self.socket.recv()
            except Exception:
                return
            if not text:
                return
            message = json.loads(text)
            (self.received if "method" in message else self.answers).append(message)

    def close(self):
        self.socket.close()


def script(url, secret, files, folder):
    """The oracle's script: every answer (status, body) and the notifications, by name."""
    server = Server(url, secret)
    listener = Notifications(url)
    server.call("aria2.getVersion")
    server.call("aria2.getSessionInfo")
    server.call("system.listMethods", token=False)
    server.call("system.listNotifications", token=False)
    server.call("aria2.getGlobalOption")
    server.call("aria2.getGlobalStat", name="getGlobalStat idle")
    # One after the other, so the stopped list has one order on both servers.
    gids = {"missing": server.call("aria2.addUri", [files + "/missing.bin"], {"dir": folder, "out": "missing.bin"}, name="addUri missing")}
    server.wait(gids["missing"], ["error"])
    gids["small"] = server.call("aria2.addUri", [files + "/small.bin"], {"dir": folder, "out": "small.bin"}, name="addUri small")
    server.wait(gids["small"], ["complete"])
    gids["slow"] = server.call("aria2.addUri", [files + "/slow.bin?rate=100000"], {"dir": folder, "out": "slow.bin"}, name="addUri slow")
    gids["paused"] = server.call("aria2.addUri", [files + "/small.bin"], {"dir": folder, "out": "paused.bin", "pause": "true"},
                                 name="addUri paused")
    names = {gid: name for name, gid in gids.items()}
    server.wait(gids["slow"], ["active"])
    # Bytes of the slow one arrive: a bitfield, a speed.
    deadline = time.time() + 10
    while time.time() < deadline and int(server.status(gids["slow"], ["completedLength"]).get("completedLength", "0")) == 0:
        time.sleep(0.05)
    for name in ("small", "slow", "missing", "paused"):
        server.call("aria2.tellStatus", gids[name], name=f"tellStatus {name}")
    server.call("aria2.tellStatus", gids["slow"], ["gid", "status", "totalLength"], name="tellStatus slow keys")
    server.call("aria2.tellActive", ["gid", "status"])
    server.call("aria2.tellWaiting", 0, 10, ["gid", "status"])
    server.call("aria2.tellStopped", 0, 10, ["gid", "status", "errorCode"])
    server.call("aria2.tellStopped", -1, 1, ["gid"], name="tellStopped backwards")
    server.call("aria2.getUris", gids["slow"])
    server.call("aria2.getFiles", gids["slow"])
    server.call("aria2.getServers", gids["slow"])
    server.call("aria2.getOption", gids["slow"])
    server.call("aria2.getGlobalStat", name="getGlobalStat busy")
    server.call("aria2.pause", gids["slow"], name="pause slow")
    server.wait(gids["slow"], ["paused"])
    server.call("aria2.tellStatus", gids["slow"], name="tellStatus slow paused")
    server.call("aria2.unpause", gids["slow"], name="unpause slow")
    server.wait(gids["slow"], ["active", "waiting"])
    server.call("aria2.remove", gids["slow"], name="remove slow")
    server.wait(gids["slow"], ["removed"])
    server.call("aria2.tellStatus", gids["slow"], name="tellStatus slow removed")
    server.call("aria2.unpause", gids["paused"], name="unpause paused")
    server.wait(gids["paused"], ["complete"])
    # What aria2 refuses, and how.
    server.call("aria2.tellStatus", "0123456789abcdef", name="tellStatus unknown")
    server.call("aria2.tellStatus", "zz", name="tellStatus invalid")
    server.call("aria2.tellStatus", name="tellStatus missing param")
    server.call("aria2.tellStatus", 5, name="tellStatus wrong type")
    server.call("aria2.tellWaiting", "0", 1, name="tellWaiting wrong type")
    server.call("aria2.pause", gids["small"], name="pause complete")
    server.call("aria2.unpause", gids["small"], name="unpause complete")
    server.call("aria2.remove", gids["small"], name="remove complete")
    server.call("aria2.getServers", gids["small"], name="getServers complete")
    server.call("aria2.addUri", [], name="addUri no uri")
    server.call("aria2.addTorrent", "AAAA", name="addTorrent")
    server.call("aria2.changePosition", gids["small"], 0, "POS_SET", name="changePosition")
    server.call("aria2.nope", name="unknown method")
    server.call("aria2.getGlobalStat", token=False, name="no token")
    server.steps.append({"name": "wrong token", **dict(zip(("status", "answer"), post(url, {
        "jsonrpc": "2.0", "id": "x", "method": "aria2.getGlobalStat", "params": ["token:wrong"]})))})
    server.raw("parse error", "{bad")
    server.raw("not an object", '"x"')
    server.raw("no method", {"jsonrpc": "2.0", "id": 1})
    server.raw("params not an array", {"jsonrpc": "2.0", "id": 1, "method": "aria2.getGlobalStat", "params": {"a": 1}})
    server.raw("batch", [{"jsonrpc": "2.0", "id": "a", "method": "system.listNotifications"},
                         {"jsonrpc": "2.0", "id": "b", "method": "aria2.getGlobalStat", "params": [f"token:{secret}"]}, 5])
    server.raw("empty batch", [])
    server.call("system.multicall", [{"methodName": "aria2.getGlobalStat", "params": [f"token:{secret}"]},
                                     {"methodName": "aria2.tellStatus", "params": [f"token:{secret}", "0123456789abcdef"]}],
                token=False, name="multicall")
    server.call("aria2.changeGlobalOption", {"max-concurrent-downloads": "5"})
    server.call("aria2.removeDownloadResult", gids["missing"])
    server.call("aria2.removeDownloadResult", gids["missing"], name="removeDownloadResult again")
    server.call("aria2.purgeDownloadResult")
    server.call("aria2.tellStopped", 0, 10, ["gid"], name="tellStopped purged")
    server.call("aria2.saveSession")
    # A multicall's calls run one after the other: the second reads what the first added.
    multi = "00000000000000aa"
    gids["multi"] = multi
    names[multi] = "multi"
    server.call("system.multicall", [
        {"methodName": "aria2.addUri", "params": [f"token:{secret}", [files + "/small.bin"], {"dir": folder, "out": "multi.bin", "gid": multi}]},
        {"methodName": "aria2.tellStatus", "params": [f"token:{secret}", multi, ["gid"]]}], token=False, name="multicall adds then reads")
    server.wait(multi, ["complete"])
    # A call over the WebSocket is answered over it.
    listener.socket.send(json.dumps({"jsonrpc": "2.0", "id": 7, "method": "aria2.getGlobalStat", "params": [f"token:{secret}"]}))
    deadline = time.time() + 10
    while time.time() < deadline and not listener.answers:
        time.sleep(0.05)
    server.steps.append({"name": "websocket call", "status": 200, "answer": listener.answers[0] if listener.answers else None})
    time.sleep(0.3)
    listener.close()
    notifications = [{"method": n["method"], "download": names.get(n["params"][0]["gid"], "?")} for n in listener.received]
    return {"steps": server.steps, "notifications": notifications, "gids": gids}


def edges(url, secret):
    """Calls at the edges of what aria2 reads, against two paused downloads whose GIDs share a prefix."""
    server = Server(url, secret)
    gids = {"a": "7000000000000001", "b": "7000000000000002"}
    for name, gid in gids.items():
        server.call("aria2.addUri", [f"http://127.0.0.1:9/{name}.bin"], {"gid": gid, "pause": "true"}, name=f"addUri {name}")
    server.call("aria2.tellStatus", "7000", name="tellStatus ambiguous prefix")
    server.call("aria2.remove", "7000", name="remove ambiguous prefix")
    server.call("aria2.tellStatus", "7000000000000001", ["gid", 1], name="tellStatus keys not all strings")
    server.call("aria2.tellStopped", 0, -1, name="tellStopped num -1")
    server.call("aria2.tellWaiting", 0, -1, name="tellWaiting num -1")
    server.call("aria2.tellWaiting", 0, 10, [1, "gid", None], name="tellWaiting keys not all strings")
    server.call("aria2.tellActive", [1, "gid"], name="tellActive keys not all strings")
    server.raw("a method named twice", '{"jsonrpc":"2.0","id":1,"method":"aria2.getGlobalStat","method":"aria2.shutdown","params":["token:%s"]}' % secret)
    server.raw("a method named twice in a batch", '[{"jsonrpc":"2.0","id":1,"method":"aria2.getGlobalStat","method":"aria2.shutdown",'
               '"params":["token:%s"]},{"jsonrpc":"2.0","id":2,"method":"aria2.getGlobalStat","params":["token:%s"]}]' % (secret, secret))
    server.call("system.multicall", [5, "x", {"methodName": "aria2.getGlobalStat", "params": [f"token:{secret}"]}, {"params": []}],
                token=False, name="multicall of what is not a struct")
    server.call("aria2.addUri", ["http://127.0.0.1:9/c.bin"], {"pause": "yes"}, name="addUri pause yes")
    server.call("aria2.addUri", ["http://127.0.0.1:9/d.bin"], {"gid": "0000000000000000"}, name="addUri gid zero")
    server.call("aria2.tellWaiting", 0, 10, ["gid"], name="tellWaiting after")
    token = json.dumps(f"token:{secret}")
    server.raw("params named twice", '{"jsonrpc":"2.0","id":1,"method":"aria2.getGlobalStat","params":[%s],"params":[]}' % token)
    server.raw("id named twice", '{"jsonrpc":"2.0","id":1,"id":2,"method":"aria2.getGlobalStat","params":[%s]}' % token)
    server.raw("jsonrpc named twice", '{"jsonrpc":"2.0","jsonrpc":"2.0","id":1,"method":"aria2.getGlobalStat","params":[%s]}' % token)
    server.raw("methodName named twice in a multicall", '{"jsonrpc":"2.0","id":1,"method":"system.multicall","params":[[{"methodName":'
               '"aria2.getGlobalStat","methodName":"aria2.getVersion","params":[%s]}]]}' % token)
    # The methods the other calls never reach; shutdown and forceShutdown never: they would stop the oracle.
    server.call("aria2.forcePause", gids["a"], name="forcePause of a paused download")
    server.call("aria2.pauseAll")
    server.call("aria2.forcePauseAll")
    server.call("aria2.changeOption", gids["a"], {}, name="changeOption nothing")
    server.call("aria2.changeOption", gids["a"], {"max-download-limit": "100K"}, name="changeOption max-download-limit")
    server.call("aria2.changeUri", gids["a"], 1, [], ["http://127.0.0.1:9/a2.bin"])
    server.call("aria2.getPeers", gids["a"])
    server.call("aria2.addMetalink", "AAAA")
    server.call("aria2.forceRemove", gids["b"], name="forceRemove of a paused download")
    server.call("aria2.tellStatus", gids["b"], ["gid", "status"], name="tellStatus after forceRemove")
    server.call("aria2.unpauseAll")
    return {"steps": server.steps, "notifications": [], "gids": gids}


# Values compared as well as shapes: what a download's state is, whatever the timing.
VALUES = {"status", "errorCode", "pieceLength", "numPieces", "totalLength", "length", "selected", "index", "uploadLength",
          "uploadSpeed", "gid", "result", "uri", "numActive", "numWaiting", "numStopped", "numStoppedTotal", "jsonrpc", "id"}


def labelled(value, names):
    """`value` with each download's GID replaced by its name in the script (each server gives its own)."""
    if isinstance(value, dict):
        return {key: labelled(item, names) for key, item in value.items()}
    if isinstance(value, list):
        return [labelled(item, names) for item in value]
    if isinstance(value, str):
        for gid, name in names.items():
            value = value.replace(gid, f"<{name}>")
    return value


def shape(value):
    """A value's shape: objects by key, arrays by their elements' shapes (each shape once), scalars by type."""
    if isinstance(value, dict):
        return {key: shape(item) for key, item in value.items()}
    if isinstance(value, list):
        shapes = []
        for item in value:
            if shape(item) not in shapes:
                shapes.append(shape(item))
        return shapes
    return type(value).__name__


# Options only aria2 has (BitTorrent's, FTP's, its own file allocation …): one line for all of them.
OPTION_LISTS = ("aria2.getOption.result", "aria2.getGlobalOption.result")


def differences(path, left, right, out):
    if isinstance(left, dict) and isinstance(right, dict):
        if path in OPTION_LISTS and set(left) - set(right):
            out.append(f"{path}: options only aria2 has")
            left = {key: value for key, value in left.items() if key in right}
        for key in sorted(set(left) | set(right)):
            if key not in right:
                out.append(f"{path}.{key}: only aria2")
            elif key not in left:
                out.append(f"{path}.{key}: only syncagent")
            else:
                differences(f"{path}.{key}", left[key], right[key], out)
    elif isinstance(left, list) and isinstance(right, list):
        if len(left) == 1 and len(right) == 1:
            differences(f"{path}[]", left[0], right[0], out)
        elif left != right:
            out.append(f"{path}: aria2 {json.dumps(left)}, syncagent {json.dumps(right)}")
    elif left != right:
        out.append(f"{path}: aria2 {json.dumps(left)}, syncagent {json.dumps(right)}")


def value_differences(path, left, right, out):
    """The values of the keys in VALUES, wherever both answers have them."""
    if isinstance(left, dict) and isinstance(right, dict):
        for key in sorted(set(left) & set(right)):
            if key in VALUES and not isinstance(left[key], (dict, list)) and left[key] != right[key]:
                out.append(f"{path}.{key} = aria2 {json.dumps(left[key])}, syncagent {json.dumps(right[key])}")
            else:
                value_differences(f"{path}.{key}", left[key], right[key], out)
    elif isinstance(left, list) and isinstance(right, list):
        if path.endswith(".uris") and left and right:
            # aria2 lists a URL again each time it goes back to it (a retry, a pause): the URLs and the first status count.
            if sorted({u["uri"] for u in left}) != sorted({u["uri"] for u in right}) or left[0]["status"] != right[0]["status"]:
                out.append(f"{path}: aria2 {json.dumps(left)}, syncagent {json.dumps(right)}")
            return
        if len(left) != len(right):
            out.append(f"{path}: aria2 {len(left)} elements, syncagent {len(right)}")
        for index, (a, b) in enumerate(zip(left, right)):
            value_differences(f"{path}[{index}]", a, b, out)


def compare(aria2_path, syncagent_path):
    """Field by field: the steps' HTTP status, their answers' shapes, error codes and messages, notifications by download."""
    aria2, ours = (json.load(open(path)) for path in (aria2_path, syncagent_path))
    for source in (aria2, ours):
        source["steps"] = labelled(source["steps"], {gid: name for name, gid in source["gids"].items()})
    out = []
    ours_by_name = {step["name"]: step for step in ours["steps"]}
    for step in aria2["steps"]:
        name, theirs = step["name"], ours_by_name.get(step["name"])
        if theirs is None:
            out.append(f"{name}: not run against syncagent")
            continue
        if step["status"] != theirs["status"]:
            out.append(f"{name}: HTTP status: aria2 {step['status']}, syncagent {theirs['status']}")
        differences(name, shape(step["answer"]), shape(theirs["answer"]), out)
        value_differences(name, step["answer"], theirs["answer"], out)
        for left, right, where in errors(step["answer"], theirs["answer"], name):
            if left != right:
                out.append(f"{where}: aria2 {json.dumps(left)}, syncagent {json.dumps(right)}")
    for source, label in ((aria2, "aria2"), (ours, "syncagent")):
        source["by download"] = {}
        for n in source["notifications"]:
            source["by download"].setdefault(n["download"], []).append(n["method"])
    for download in sorted(set(aria2["by download"]) | set(ours["by download"])):
        left, right = aria2["by download"].get(download, []), ours["by download"].get(download, [])
        if left != right:
            out.append(f"notifications of {download}: aria2 {left}, syncagent {right}")
    return out


def errors(left, right, where):
    """Each error struct at the same place in two answers: its code and message."""
    if isinstance(left, dict) and isinstance(right, dict):
        if "code" in left and "message" in left:
            yield (left.get("code"), left.get("message")), (right.get("code"), right.get("message")), f"{where} error"
        for key in left:
            if key in right:
                yield from errors(left[key], right[key], f"{where}.{key}")
    elif isinstance(left, list) and isinstance(right, list) and len(left) == len(right):
        for index, (a, b) in enumerate(zip(left, right)):
            yield from errors(a, b, f"{where}[{index}]")


def with_aria2p(port, secret, url, out_name):
    """aria2p's library, then its CLI, against one server: what each saw."""
    import aria2p
    seen = {}
    api = aria2p.API(aria2p.Client(host="http://127.0.0.1", port=int(port), secret=secret))
    events = []
    api.listen_to_notifications(threaded=True, on_download_start=lambda _, gid: events.append(("start", gid)),
                                on_download_complete=lambda _, gid: events.append(("complete", gid)),
                                on_download_pause=lambda _, gid: events.append(("pause", gid)),
                                on_download_stop=lambda _, gid: events.append(("stop", gid)),
                                on_download_error=lambda _, gid: events.append(("error", gid)), handle_signals=False)
    seen["version"] = api.client.get_version()["version"]
    download = api.add_uris([url], options={"out": out_name})
    deadline = time.time() + 20
    while time.time() < deadline:
        download.update()
        if download.is_complete:
            break
        time.sleep(0.05)
    seen["library"] = {"gid": download.gid, "status": download.status, "name": download.name,
                       "total": download.total_length, "completed": download.completed_length,
                       "progress": download.progress_string(), "path": str(download.files[0].path)}
    seen["downloads"] = sorted(d.gid for d in api.get_downloads())
    slow = api.add_uris([url + "?rate=20000"], options={"out": "slow-" + out_name})
    time.sleep(0.3)
    seen["paused"] = api.pause([slow])
    time.sleep(0.3)
    slow.update()
    seen["slow status after pause"] = slow.status
    seen["resumed"] = api.resume([slow])
    time.sleep(0.3)
    slow.update()
    seen["slow status after resume"] = slow.status
    seen["removed"] = api.remove([slow])
    time.sleep(0.5)
    seen["events"] = [(kind, "first" if gid == download.gid else "slow" if gid == slow.gid else gid) for kind, gid in events]
    api.stop_listening()
    cli = [os.path.join(os.path.dirname(sys.executable), "aria2p"), "-p", str(port), "-s", secret]

    def run(*args):
        done = subprocess.run(cli + list(args), capture_output=True, text=True, timeout=60)
        return {"code": done.returncode, "out": done.stdout, "err": done.stderr}
    added = run("add", url + "?rate=20000", "-o", "out=cli-" + out_name)
    seen["cli add"] = added
    gid = next((word for word in added["out"].split() if len(word) == 16), "")
    seen["cli gid"] = gid
    seen["cli show"] = run("show")
    seen["cli pause"] = run("pause", gid)
    time.sleep(0.3)
    seen["cli status after pause"] = api.get_download(gid).status if gid else None
    seen["cli resume"] = run("resume", gid)
    time.sleep(0.3)
    seen["cli status after resume"] = api.get_download(gid).status if gid else None
    seen["cli remove"] = run("remove", gid)
    time.sleep(0.5)
    try:
        seen["cli status after remove"] = api.get_download(gid).status
    except Exception as error:
        seen["cli status after remove"] = f"gone: {error}"
    return seen


def listen(url, gid):
    """The notifications of download `gid` a WebSocket client gets until it hears of its end (and a second more,
    for one told twice). Says "connected" on stderr once it listens."""
    listener = Notifications(url)
    print("connected", file=sys.stderr, flush=True)
    ends = ("aria2.onDownloadComplete", "aria2.onDownloadError", "aria2.onDownloadStop")
    deadline = time.time() + 60
    while time.time() < deadline and not any(n["method"] in ends and n["params"][0]["gid"] == gid for n in listener.received):
        time.sleep(0.02)
    time.sleep(1)
    listener.close()
    return [(n["method"], n["params"][0]["gid"]) for n in listener.received if n["params"][0]["gid"] == gid]


def flood(url, secret, calls):
    """`calls` calls over four WebSockets, sent as fast as they go: how many were answered, and how."""
    calls = int(calls)
    sockets = [websocket.create_connection(url.replace("http://", "ws://"), timeout=30) for _ in range(4)]
    message = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.getGlobalStat", "params": [f"token:{secret}"]})
    answers = {"ok": 0, "refused": 0, "other": 0}
    lock = threading.Lock()

    def read(position, sock):
        # Read as they come, as a client does: the server reads no more from one that does not.
        expected = calls // 4 + (1 if position < calls % 4 else 0)
        while expected > 0:
            answer = json.loads(sock.recv())
            if "method" in answer:
                # A notification of the download running meanwhile: no answer.
                continue
            expected -= 1
            with lock:
                if "result" in answer:
                    answers["ok"] += 1
                elif any(words in answer.get("error", {}).get("message", "") for words in ("Too many requests", "The agent is busy")):
                    answers["refused"] += 1
                else:
                    answers["other"] += 1
                    answers.setdefault("first other", answer)
    readers = [threading.Thread(target=read, args=(position, sock)) for position, sock in enumerate(sockets)]
    for reader in readers:
        reader.start()
    started = time.time()
    for index in range(calls):
        sockets[index % 4].send(message)
    sent_in = time.time() - started
    for reader in readers:
        reader.join()
    for sock in sockets:
        sock.close()
    return {"sent in seconds": sent_in, **answers}


LISTING = b'{"jsonrpc":"2.0","id":1,"method":"system.listMethods"}'


def frames(host, port):
    """Malformed WebSocket frames, each on a connection of its own: how each connection ended."""
    masked = masked_frame
    cases = {
        "unmasked frame": masked(0x1, b'{"id":1}', mask=False),
        "reserved opcode": masked(0x3, b"x"),
        "fragmented ping": masked(0x9, b"x", fin=False),
        "ping over 125 bytes": masked(0x9, b"x" * 200),
        "100 MB frame announced": masked(0x1, b"", length=100 << 20),
        "binary frame": masked(0x2, b"\x00\x01"),
        "malformed JSON text": masked(0x1, b"{bad json"),
        "continuation first": masked(0x0, b"x"),
        "invalid UTF-8 text": masked(0x1, b"\xff\xfe\"x\""),
        # A message in three fragments, as RFC 6455 §5.4 allows: answered whole.
        "fragmented text": masked(0x1, LISTING[:10], fin=False) + masked(0x0, LISTING[10:30], fin=False) + masked(0x0, LISTING[30:]),
        # RSV1 means an extension (permessage-deflate) that was never agreed (§5.2).
        "RSV1 set": masked(0x1, LISTING, rsv=4),
    }
    results = {}
    for name, frame in cases.items():
        sock, status = handshake(host, port)
        try:
            sock.sendall(frame)
            sock.settimeout(5)
            received, closed = b"", False
            try:
                while True:
                    chunk = sock.recv(65536)
                    if not chunk:
                        closed = True
                        break
                    received += chunk
                    # An answer to a text frame: the connection is kept for the next call.
                    if b"Parse error" in received or b"aria2.addUri" in received:
                        sock.settimeout(1)
            except (socket.timeout, ConnectionResetError):
                pass
            results[name] = {"upgrade": status, "closed by server": closed, "answer": received[:200].decode("latin-1")}
        finally:
            sock.close()
    return results


def handshake(host, port, sock=None):
    """A WebSocket upgrade on a connection of its own (or `sock`): the socket and the status line."""
    sock = sock or socket.create_connection((host, int(port)), timeout=5)
    key = base64.b64encode(os.urandom(16)).decode()
    sock.sendall((f"GET /jsonrpc HTTP/1.1\r\nHost: {host}:{port}\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n"
                  f"Sec-WebSocket-Key: {key}\r\nSec-WebSocket-Version: 13\r\n\r\n").encode())
    head = b""
    while b"\r\n\r\n" not in head:
        chunk = sock.recv(1)
        if not chunk:
            break
        head += chunk
    return sock, head.split(b"\r\n")[0].decode()


def masked_frame(opcode, payload, fin=True, rsv=0, mask=True, length=None):
    """A client's frame (masked, as RFC 6455 asks, unless not `mask`), announcing `length` bytes if given."""
    first = (0x80 if fin else 0) | rsv << 4 | opcode
    size = len(payload) if length is None else length
    if size < 126:
        header = struct.pack("!BB", first, (0x80 if mask else 0) | size)
    elif size < 1 << 16:
        header = struct.pack("!BBH", first, (0x80 if mask else 0) | 126, size)
    else:
        header = struct.pack("!BBQ", first, (0x80 if mask else 0) | 127, size)
    if not mask:
        return header + payload
    key = os.urandom(4)
    return header + key + bytes(b ^ key[i % 4] for i, b in enumerate(payload))


def pingflood(host, port, count):
    """`count` pings, 125 bytes each, from a client that never reads the pongs: how many went out before the
    server stopped taking them (a send that waits 3 s is taken for a server no longer reading)."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_RCVBUF, 4096)
    sock.settimeout(5)
    sock.connect((host, int(port)))
    sock, status = handshake(host, port, sock)
    batch = masked_frame(0x9, b"p" * 125) * 1000
    sock.settimeout(3)
    sent = 0
    try:
        while sent < int(count):
            sock.sendall(batch)
            sent += 1000
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    sock.close()
    return {"upgrade": status, "sent": sent}


def slowloris(host, port, count):
    """`count` connections, each sending a request's head one line a second and never ending it (the
    idle close never comes): how many the server closed, within 60 s."""
    held = []
    for _ in range(int(count)):
        sock = socket.create_connection((host, int(port)), timeout=5)
        sock.sendall(f"POST /jsonrpc HTTP/1.1\r\nHost: {host}:{port}\r\n".encode())
        sock.setblocking(False)
        held.append(sock)
    closed = set()
    said = [b""] * len(held)
    deadline = time.time() + 60
    while len(closed) < len(held) and time.time() < deadline:
        time.sleep(1)
        for index, sock in enumerate(held):
            if index in closed:
                continue
            try:
                chunk = sock.recv(4096)
                said[index] += chunk
                if chunk == b"":
                    closed.add(index)
                    continue
            except BlockingIOError:
                pass
            except OSError:
                closed.add(index)
                continue
            try:
                sock.send(b"X-Slow: y\r\n")
            except OSError:
                closed.add(index)
    for sock in held:
        sock.close()
    return {"opened": len(held), "closed by server": len(closed),
            "answered 408": sum(answer.startswith(b"HTTP/1.1 408 Request Timeout") for answer in said)}


def is_open(sock):
    """Whether the server has not closed `sock` (nothing is read that a test needs)."""
    sock.setblocking(False)
    try:
        return sock.recv(1) != b""
    except BlockingIOError:
        return True
    except OSError:
        return False


def badtokens(url, secret):
    """A page floods wrong tokens (a batch of 120 at once, then six HTTP senders and a WebSocket) while a
    client with the secret makes 20 calls: how each of those 20 was answered."""
    stop = threading.Event()
    flooded = {"calls": 0}
    page = {"Content-Type": "text/plain", "Origin": "https://evil.example"}
    guess = {"jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion", "params": ["token:guess"]}
    post(url, json.dumps([guess] * 120).encode(), headers=page)

    def over_http():
        while not stop.is_set():
            try:
                post(url, json.dumps(guess).encode(), headers=page)
            except Exception:
                pass
            flooded["calls"] += 1

    def over_websocket():
        sock = websocket.create_connection(url.replace("http://", "ws://"), timeout=60, origin="https://evil.example")
        while not stop.is_set():
            sock.send(json.dumps(guess))
            sock.recv()
            flooded["calls"] += 1
        sock.close()
    senders = [threading.Thread(target=over_http) for _ in range(6)] + [threading.Thread(target=over_websocket)]
    for sender in senders:
        sender.start()
    out = {"answered": 0, "refused": []}
    for index in range(20):
        status, answer = post(url, {"jsonrpc": "2.0", "id": index, "method": "aria2.getVersion", "params": [f"token:{secret}"]})
        if isinstance(answer, dict) and "result" in answer:
            out["answered"] += 1
        else:
            out["refused"].append(answer)
    stop.set()
    for sender in senders:
        sender.join()
    out["flood calls"] = flooded["calls"]
    return out


def guessslots(host, port, secret, count):
    """A page's `count` connections (more than the server keeps), each holding a wrong-token POST that waits its
    turn and opening another when it is closed, while a client with the secret makes 20 calls, each on a
    connection of its own (as curl does): how many of the 20 were answered."""
    stop = threading.Event()
    seen = {"sent": 0, "answered": 0, "closed": 0}
    lock = threading.Lock()
    guess = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion", "params": ["token:guess"]}).encode()
    head = (f"POST /jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\nOrigin: https://evil.example\r\n"
            f"Content-Length: {len(guess)}\r\n\r\n").encode()

    def guesser():
        while not stop.is_set():
            try:
                with socket.create_connection((host, int(port)), timeout=70) as sock:
                    sock.sendall(head + guess)
                    with lock:
                        seen["sent"] += 1
                    answer = sock.recv(65536)
                with lock:
                    seen["answered" if b"Unauthorized" in answer else "closed"] += 1
            except OSError:
                with lock:
                    seen["closed"] += 1
            stop.wait(0.2)
    guessers = [threading.Thread(target=guesser) for _ in range(int(count))]
    for thread in guessers:
        thread.start()
    # The burst of guesses is spent once more are waiting than the server keeps connections.
    deadline = time.time() + 60
    while time.time() < deadline and seen["sent"] - seen["answered"] - seen["closed"] < 64:
        time.sleep(0.05)
    waiting = seen["sent"] - seen["answered"] - seen["closed"]
    out = {"guesses waiting": waiting, "answered": 0, "failed": []}
    for index in range(20):
        try:
            status, answer = post(f"http://{host}:{port}/jsonrpc",
                                  {"jsonrpc": "2.0", "id": index, "method": "aria2.getVersion", "params": [f"token:{secret}"]})
            if isinstance(answer, dict) and "result" in answer:
                out["answered"] += 1
            else:
                out["failed"].append(str(answer))
        except OSError as error:
            out["failed"].append(repr(error))
    stop.set()
    for thread in guessers:
        thread.join()
    out["guesses"] = dict(seen)
    return out


def guessqueue(host, port, secret, count):
    """A page's batch of `count` wrong-token calls, waiting its turn on one connection, then calls that need no
    secret (aria2p's list_methods sends none) and one with it, each on a connection of its own: which were
    answered before the batch, and whether the batch was answered at last rather than closed as idle."""
    guesses = json.dumps([{"jsonrpc": "2.0", "id": index, "method": "aria2.getVersion", "params": ["token:guess"]}
                          for index in range(int(count))]).encode()
    page = socket.create_connection((host, int(port)), timeout=120)
    page.sendall((f"POST /jsonrpc HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\nContent-Type: text/plain\r\n"
                  f"Content-Length: {len(guesses)}\r\n\r\n").encode() + guesses)
    page.setblocking(False)

    def page_answered():
        try:
            return page.recv(1, socket.MSG_PEEK) != b""
        except BlockingIOError:
            return False
    out = {}
    url = f"http://{host}:{port}/jsonrpc"
    for name, params in [("listMethods", []), ("listNotifications", ["token:guess"]), ("listMethods with the secret", [f"token:{secret}"])]:
        method = "system.listNotifications" if name == "listNotifications" else "system.listMethods"
        status, answer = post(url, {"jsonrpc": "2.0", "id": 1, "method": method, "params": params})
        out[name] = {"answered": isinstance(answer, dict) and "result" in answer, "before the guesses": not page_answered()}
    page.setblocking(True)
    answer = b""
    try:
        while True:
            chunk = page.recv(65536)
            if not chunk:
                break
            answer += chunk
            head, _, body = answer.partition(b"\r\n\r\n")
            length = [int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")]
            if length and len(body) >= length[0]:
                break
    except OSError:
        pass
    page.close()
    out["guesses answered"] = answer.count(b"Unauthorized")
    return out


def wsslots(url, secret):
    """A client with the secret on a WebSocket, then 64 WebSockets a page opens without it and holds: how many
    the server kept, whether a call with the secret over HTTP is answered, and whether the first client stays."""
    ws_url = url.replace("http://", "ws://")
    call = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion", "params": [f"token:{secret}"]})
    trusted = websocket.create_connection(ws_url, timeout=10)
    trusted.send(call)
    trusted.recv()
    pages = []
    for _ in range(64):
        try:
            pages.append(websocket.create_connection(ws_url, timeout=5, origin="https://evil.example"))
        except Exception:
            break
    out = {"opened": len(pages)}
    for _ in range(10):
        try:
            out["http status"] = post(url, json.loads(call))[0]
            break
        except Exception as error:
            out["http status"] = repr(error)
            time.sleep(0.2)
    out["kept"] = sum(1 for page in pages if is_open(page.sock))
    try:
        trusted.send(call)
        out["trusted answered"] = "result" in json.loads(trusted.recv())
    except Exception as error:
        out["trusted answered"] = repr(error)
    for sock in pages + [trusted]:
        sock.close()
    return out


def calls(url, secret, listed):
    """Each [method, param…] of `listed` (JSON) with the token: the answers, with their HTTP status."""
    answers = []
    for method, *params in json.loads(listed):
        try:
            status, answer = post(url, {"jsonrpc": "2.0", "id": len(answers), "method": method, "params": [f"token:{secret}"] + params})
        except (urllib.error.URLError, ConnectionError, http.client.HTTPException) as error:
            # No answer at all (the agent died): left out.
            print(f"{method}: no answer: {error}", file=sys.stderr)
            continue
        answers.append({"status": status, "answer": answer})
    return answers


def request(url, body):
    """One request body, sent as it is: the HTTP status and the answer."""
    status, answer = post(url, body.encode())
    return {"status": status, "answer": answer}


def raw_http(host, port, request, read_for=5.0):
    """Sends `request` (bytes) on a connection of its own: the status line and body the server answered, and whether it closed."""
    sock = socket.create_connection((host, int(port)), timeout=read_for)
    received, closed = b"", False
    try:
        sock.sendall(request)
        while True:
            chunk = sock.recv(65536)
            if not chunk:
                closed = True
                break
            received += chunk
            head, _, body = received.partition(b"\r\n\r\n")
            length = next((int(line.split(b":")[1]) for line in head.split(b"\r\n") if line.lower().startswith(b"content-length:")), None)
            if length is not None and len(body) >= length:
                break
    except (socket.timeout, ConnectionResetError, BrokenPipeError):
        pass
    finally:
        sock.close()
    head, _, body = received.partition(b"\r\n\r\n")
    return {"status": head.split(b"\r\n")[0].decode("latin-1"), "headers": head.decode("latin-1"), "body": body[:300].decode("latin-1"),
            "closed": closed}


def unauthorized(host, port, secret):
    """A page-like client: no token, a wrong one, a right one in the wrong place; and the CORS answers a browser would see."""
    url = f"http://{host}:{port}/jsonrpc"
    out = {}
    for name, params in (("no token", []), ("wrong token", ["token:guess-" + secret[::-1]]), ("token not first", ["x", f"token:{secret}"])):
        out[name] = post(url, {"jsonrpc": "2.0", "id": 1, "method": "aria2.addUri", "params": params + [["http://127.0.0.1:9/x"]]},
                         headers={"Content-Type": "text/plain", "Origin": "http://evil.example"})
    out["preflight"] = raw_http(host, port, (f"OPTIONS /jsonrpc HTTP/1.1\r\nHost: {host}:{port}\r\nOrigin: http://evil.example\r\n"
                                             "Access-Control-Request-Method: POST\r\nAccess-Control-Request-Headers: content-type\r\n"
                                             "Content-Length: 0\r\n\r\n").encode())
    try:
        sock = websocket.create_connection(f"ws://{host}:{port}/jsonrpc", timeout=10, origin="http://evil.example")
        sock.send(json.dumps({"jsonrpc": "2.0", "id": 2, "method": "aria2.tellActive", "params": ["token:nope"]}))
        out["websocket wrong token"] = json.loads(sock.recv())
        sock.close()
    except Exception as error:
        out["websocket wrong token"] = f"failed: {error}"
    return out


def rebinding(host, port, secret):
    """Requests naming a host a DNS-rebinding page would: over HTTP and as a WebSocket upgrade."""
    body = json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.getVersion", "params": [f"token:{secret}"]}).encode()
    out = {}
    for name in (f"evil.example:{port}", "evil.example", f"127.0.0.1.nip.io:{port}", f"localhost.evil.example:{port}"):
        out["http " + name] = raw_http(host, port, (f"POST /jsonrpc HTTP/1.1\r\nHost: {name}\r\nContent-Type: application/json\r\n"
                                                    f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    key = base64.b64encode(os.urandom(16)).decode()
    out["websocket evil.example"] = raw_http(host, port, (f"GET /jsonrpc HTTP/1.1\r\nHost: evil.example:{port}\r\nUpgrade: websocket\r\n"
                                                          f"Connection: Upgrade\r\nSec-WebSocket-Key: {key}\r\n"
                                                          "Sec-WebSocket-Version: 13\r\n\r\n").encode())
    out["http localhost"] = raw_http(host, port, (f"POST /jsonrpc HTTP/1.1\r\nHost: localhost:{port}\r\nContent-Type: application/json\r\n"
                                                  f"Content-Length: {len(body)}\r\n\r\n").encode() + body)
    return out


def huge(host, port, secret):
    """A 100 MB request: announced, then streamed chunked, then as one WebSocket message. How each was refused, and when."""
    out = {}
    started = time.time()
    out["announced"] = raw_http(host, port, (f"POST /jsonrpc HTTP/1.1\r\nHost: {host}:{port}\r\nContent-Length: {100 << 20}\r\n\r\n").encode())
    out["announced"]["seconds"] = time.time() - started
    sock = socket.create_connection((host, int(port)), timeout=10)
    sock.sendall(f"POST /jsonrpc HTTP/1.1\r\nHost: {host}:{port}\r\nTransfer-Encoding: chunked\r\n\r\n".encode())
    chunk = b"[" * (1 << 20)
    sent = 0
    try:
        while sent < 100 << 20:
            sock.sendall(b"%x\r\n" % len(chunk) + chunk + b"\r\n")
            sent += len(chunk)
    except (BrokenPipeError, ConnectionResetError, socket.timeout):
        pass
    answer = b""
    try:
        while True:
            got = sock.recv(65536)
            if not got:
                break
            answer += got
    except (ConnectionResetError, socket.timeout):
        pass
    sock.close()
    out["streamed"] = {"sent before refused": sent, "status": answer.split(b"\r\n")[0].decode("latin-1")}
    try:
        ws = websocket.create_connection(f"ws://{host}:{port}/jsonrpc", timeout=20)
        ws.send("[" * (100 << 20))
        out["websocket"] = {"answer": ws.recv()[:100]}
    except Exception as error:
        out["websocket"] = {"closed": type(error).__name__}
    return out


def malformed(host, port, secret):
    """Bodies no JSON-RPC client sends: each answer's HTTP status and error."""
    url = f"http://{host}:{port}/jsonrpc"
    bodies = {
        "not JSON": b"{bad", "empty": b"", "NUL bytes": b"\x00" * 64, "invalid UTF-8": b'{"method":"\xff"}',
        "a lone surrogate": b'{"jsonrpc":"2.0","id":1,"method":"\\ud800"}', "nested 100000 deep": b"[" * 100000,
        "number too big": b'{"jsonrpc":"2.0","id":1e999,"method":"x"}', "a string": b'"x"', "params an object":
        json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.tellStatus", "params": {"a": 1}}).encode(),
        "gid an object": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.tellStatus", "params": [f"token:{secret}", {"a": 1}]}).encode(),
        "offset huge": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.tellWaiting",
                                   "params": [f"token:{secret}", -9223372036854775808, 9223372036854775807]}).encode(),
        "10,000 calls in one batch": json.dumps([{"jsonrpc": "2.0", "id": i, "method": "aria2.getGlobalStat", "params": [f"token:{secret}"]}
                                                 for i in range(10000)]).encode(),
        "multicall of a multicall": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "system.multicall",
                                                "params": [[{"methodName": "system.multicall", "params": [[]]}]]}).encode(),
        "addUri of a file URL": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.addUri",
                                            "params": [f"token:{secret}", ["file:///etc/passwd"]]}).encode(),
        "addUri out of download_dir": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.addUri",
                                                  "params": [f"token:{secret}", ["http://127.0.0.1:9/x"], {"dir": "/etc", "out": "passwd"}]}).encode(),
        "addUri header with a line break": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.addUri",
                                                       "params": [f"token:{secret}", ["http://127.0.0.1:9/x"], {"header": "X-A: 1\r\nX-B: 2"}]}).encode(),
        # A job file is at most 64 KiB: so is what an addUri brings.
        "addUri with 100,000 headers": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.addUri",
                                                   "params": [f"token:{secret}", ["http://127.0.0.1:9/x"],
                                                              {"header": [f"X-{i}: {i}" for i in range(100000)]}]}).encode(),
        "addUri with a 1.5 MB header": json.dumps({"jsonrpc": "2.0", "id": 1, "method": "aria2.addUri",
                                                   "params": [f"token:{secret}", ["http://127.0.0.1:9/x"],
                                                              {"header": "X-Big: " + "a" * 1_500_000}]}).encode(),
    }
    out = {}
    for name, body in bodies.items():
        status, answer = post(url, body)
        error = answer.get("error") if isinstance(answer, dict) else None
        out[name] = {"status": status, "error": error, "kind": type(answer).__name__}
    return out


def connections(host, port, count):
    """`count` connections opened at once and held: how many the server kept."""
    held = []
    for _ in range(int(count)):
        try:
            held.append(socket.create_connection((host, int(port)), timeout=5))
        except OSError:
            break
    time.sleep(0.5)
    open_ones = 0
    for sock in held:
        sock.setblocking(False)
        try:
            open_ones += 0 if sock.recv(1) == b"" else 1
        except BlockingIOError:
            open_ones += 1
        except OSError:
            pass
    for sock in held:
        sock.close()
    return {"opened": len(held), "kept": open_ones}


if __name__ == "__main__":
    command, arguments = sys.argv[1], sys.argv[2:]
    handlers = {"script": script, "compare": compare, "aria2p": with_aria2p, "listen": listen,
                "flood": flood, "frames": frames, "calls": calls, "unauthorized": unauthorized, "rebinding": rebinding,
                "huge": huge, "malformed": malformed, "connections": connections, "pingflood": pingflood,
                "slowloris": slowloris, "badtokens": badtokens, "guessslots": guessslots, "guessqueue": guessqueue, "wsslots": wsslots,
                "request": request, "edges": edges}
    print(json.dumps(handlers[command](*arguments), indent=1))
