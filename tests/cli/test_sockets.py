#!/usr/bin/env python3
"""What the socket commands (send, recv, serve, monitor, stat, show) share: URLs and
plain endpoints, --socket, --bind/--connect, --heartbeat, timeouts that say
what socket was made, addresses in use."""

import json
import signal
import socket
import sys
import time

from support import (ERROR_LINE, BY_PATH, vec, expected_tensors, run, start, finish, free_tcp_endpoint,
                     free_port, CliTest, main)


class Sockets(CliTest):
    def test_help_of_every_socket_command_tells_its_defaults(self):
        # What a plain endpoint makes when no --socket is given.
        plain = {"send": "PUSH socket that connects", "recv": "PULL socket that binds",
                 "serve": "PUSH socket that connects", "monitor": "SUB socket that connects",
                 "stat": "SUB socket that connects"}
        for command, socket_text in plain.items():
            with self.subTest(command=command):
                r = run(command, "--help")
                self.assertEqual(r.returncode, 0)
                text = r.stdout.decode()
                flat = " ".join(text.split())
                # One name for the positional argument (optional for monitor and stat,
                # which default to tensormon's URL); every command has the footer.
                self.assertRegex(text, rf"Usage: tenbin {command} \[OPTIONS\] (URL(\.\.\.)?|\[URL\.\.\.\])\n")
                self.assertIn(f"a plain endpoint (tcp://, ipc://, inproc://) makes a {socket_text}", flat)
                self.assertNotIn("needs it", flat)
                self.assertIn("Exit status: 0 ", flat)
                self.assertRegex(text, rf"\nExamples:\n  tenbin {command} ")

    def test_bad_url_and_bad_file(self):
        r = run("recv", "nonsense://x", "--timeout", "1")
        self.assertEqual(r.returncode, 64)  # a wrong argument, though found as the command runs
        self.assertEqual(ERROR_LINE.match(r.stderr.decode().strip())["cls"], "bad_url")
        missing = self.path("nothing.ten")
        r = run("send", free_tcp_endpoint(), "-f", missing, "--timeout", "1")
        self.assertEqual(r.returncode, 1)
        m = ERROR_LINE.match(r.stderr.decode().strip())
        self.assertEqual((m["where"], m["cls"]), (missing, "io_error"))

    def test_a_timeout_on_a_plain_endpoint_says_what_socket_it_made(self):
        # serve and stat both connect on a plain endpoint (PUSH, SUB): neither
        # hears the other, and each says what it did.
        endpoint = free_tcp_endpoint()
        stat = start("stat", endpoint, "--count", "1", "--timeout", "1")
        serve = start("serve", endpoint, "--synthetic", "f4:3", "--count", "1", "--timeout", "1", "--report", "0")
        results = {"serve": finish(serve), "stat": finish(stat)}
        results["send"] = finish(start("send", endpoint, "-f", vec("f4_matrix.ten"), "--timeout", "0.5"))
        results["recv"] = finish(start("recv", endpoint, "--timeout", "0.5"))
        results["monitor"] = finish(start("monitor", endpoint, "--timeout", "0.5", "--interval", "5"))
        expect = {
            "serve": ("message 1 could not be sent within 1 s (no receiver?)", "PUSH socket connected to", "PULL"),
            "stat": ("0 of 1 messages within 1 s", "SUB socket connected to", "PUB"),
            "send": ("message 1 of 1 could not be sent within 0.5 s", "PUSH socket connected to", "PULL"),
            "recv": ("received 0 of 1 messages; nothing arrived within 0.5 s", "PULL socket bound to", "PUSH"),
            "monitor": ("nothing for 0.5 s", "SUB socket connected to", "PUB"),
        }
        for command, (prefix, did, peer) in expect.items():
            with self.subTest(command=command):
                code, _, err = results[command]
                self.assertEqual(code, 2, err)
                m = ERROR_LINE.match(err.strip())
                self.assertIsNotNone(m, err)
                self.assertEqual((m["where"], m["cls"]), (f"tenbin {command}", "timeout"))
                self.assertTrue(m["msg"].startswith(prefix), m["msg"])
                self.assertIn(f"{did} {endpoint} needs a {peer}", m["msg"])
        # A tensorcom URL: what the socket needs at the other end, without
        # the plain endpoint's options.
        code, _, err = finish(start("stat", f"zsub://127.0.0.1:{free_port()}", "--count", "1", "--timeout", "0.5"))
        self.assertEqual(code, 2, err)
        self.assertIn("; hint: this SUB socket connected to tcp://127.0.0.1:", err)
        self.assertIn("needs a PUB that binds there, and gets only what the PUB sends after it joined", err)
        self.assertNotIn("--socket", err)

    def test_count_0_means_until_interrupted_in_every_command(self):
        # Receivers: three messages come, then Ctrl-C; what came is printed,
        # counted, drawn. Exit status 130 (143 for SIGTERM).
        png = self.path("shown.png")
        receivers = {"recv": ["--json"], "monitor": ["--json", "--interval", "10"], "stat": ["--json"],
                     "show": ["--out", png, "--max-images", "100"]}
        for sig, status in ((signal.SIGINT, 130), (signal.SIGTERM, 143)):
            running = {}
            for command, args in receivers.items():  # side by side: one wait for all
                port = free_port()
                running[command] = start(command, f"zpull://127.0.0.1:{port}", "-n", "0", "--timeout", "0", *args)
                self.addCleanup(running[command].kill)  # should a check fail before its signal
                self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "u1:8,8", "-n", "3",
                              "--report", "0")
            time.sleep(0.5)  # the three are in; each receiver waits for more
            for command, receiver in running.items():
                with self.subTest(command=command, signal=sig.name):
                    self.assertIsNone(receiver.poll(), "-n 0 stopped by itself")
                    receiver.send_signal(sig)
                    code, out, err = finish(receiver, timeout=10)
                    self.assertEqual(code, status, err)
                    lines = out.splitlines()
                    if command == "recv":
                        self.assertEqual(len(lines), 3, out)
                        self.assertIn(f"interrupted after 3 messages ({sig.name})", err)
                    elif command in ("monitor", "stat"):
                        self.assertEqual(json.loads(lines[-1])["messages"], 3, out)
                    else:
                        self.assertIn("3 images", out)
        # Senders: they send until Ctrl-C, even to a receiver gone.
        for command, args in (("send", ["-f", vec("f4_matrix.ten")]),
                              ("serve", ["--synthetic", "f4:3", "--report", "0"])):
            with self.subTest(command=command):
                endpoint = free_tcp_endpoint()
                receiver = start("recv", endpoint, "-n", "5", "--timeout", "20")
                sender = start(command, endpoint, "-n", "0", *args)
                self.assertEqual(finish(receiver)[0], 0)
                self.assertIsNone(sender.poll(), "-n 0 stopped by itself")
                sender.send_signal(signal.SIGINT)
                code, _, err = finish(sender, timeout=10)
                self.assertEqual(code, 130, err)
                self.assertRegex(err, r"interrupted after \d+ messages \(SIGINT\)")
        for command in ("send", "recv", "serve", "monitor", "stat", "show"):
            with self.subTest(command=command):
                self.assertIn("0: until interrupted", " ".join(run(command, "--help").stdout.decode().split()))

    def test_durations_are_written_as_people_write_them(self):
        # "0.25 s", never "0.250000 s" nor "2.5e-01 s", whichever command times out.
        endpoint = free_tcp_endpoint()
        for args in (["send", endpoint, "-f", vec("f4_matrix.ten")], ["recv", endpoint],
                     ["serve", endpoint, "--synthetic", "f4:3", "--report", "0"], ["monitor", endpoint],
                     ["stat", endpoint], ["show", endpoint, "--out", self.path("x.png")]):
            with self.subTest(command=args[0]):
                r = run(*args, "--timeout", "0.25")
                self.assertEqual(r.returncode, 2, r.stderr)
                self.assertRegex(r.stderr.decode(), r"(within|for) 0\.25 s\b")
                self.assertNotRegex(r.stderr.decode(), r"\d\.\d*0 s\b|\de[-+]\d")

    def test_help_sentences_are_finished(self):
        # Each option's help, joined across its lines, ends with a word a
        # sentence can end with (--curve-allow's once ended "... a key pair is").
        dangling = {"a", "an", "the", "is", "are", "which", "that", "to", "of", "and", "or", "with", "for", "by"}
        for command in ("info", "send", "recv", "serve", "monitor", "stat", "convert", "show", "keygen"):
            text = run(command, "--help").stdout.decode()
            helps, current = {}, None
            for line in text.splitlines():
                if line.startswith("  -"):
                    current = line.split()[0]
                    helps[current] = line[30:].strip() if len(line) > 30 and line[29] == " " else ""
                elif current and line.startswith(" " * 30):
                    helps[current] += " " + line.strip()
                else:
                    current = None
            self.assertIn("-h,--help", helps, text)
            for option, words in helps.items():
                with self.subTest(command=command, option=option):
                    self.assertTrue(words, option)
                    self.assertNotIn(words.split()[-1].lower(), dangling, words)
            if command in ("send", "recv", "serve", "monitor", "stat", "show"):
                self.assertIn("without it, any client holding a key pair gets in", helps["--curve-allow"])

    def test_heartbeats_are_an_option_of_every_socket_command(self):
        port = free_port()
        receiver = start("recv", f"zpull://127.0.0.1:{port}", "--count", "1", "--json", "--timeout", "20",
                         "--heartbeat", "0.1")
        # Its first spelling, in milliseconds, still works (out of the help).
        code, _, err = finish(start("send", f"zpush://127.0.0.1:{port}", "--file", vec("i4_i8.ten"),
                                    "--heartbeat-ms", "100"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        self.assertEqual(json.loads(out)["tensors"], expected_tensors(BY_PATH["i4_i8.ten"]))
        for command in ("send", "recv", "serve", "monitor", "stat"):
            with self.subTest(command=command):
                r = run(command, "--help")
                self.assertIn(b"--heartbeat ", r.stdout)
                self.assertNotIn(b"--heartbeat-ms", r.stdout)  # one unit, seconds, in the help
        for option in ("--heartbeat", "--heartbeat-ms"):
            r = run("recv", f"zpull://127.0.0.1:{port}", option, "-5")
            self.assertEqual(r.returncode, 64)
            self.assertIn(b"give a number of 0 or more", r.stderr)
        r = run("recv", f"zpull://127.0.0.1:{port}", "--heartbeat", "1", "--heartbeat-ms", "100")
        self.assertEqual(r.returncode, 64)

    def test_a_url_scheme_that_does_not_fit_the_command_is_refused(self):
        code, _, err = finish(start("send", "zpull://127.0.0.1:1", "--file", vec("i4_i8.ten")))
        self.assertEqual(code, 64)
        self.assertIn("bad_url", err)
        code, _, err = finish(start("recv", "zfoo://127.0.0.1:1"))
        self.assertEqual(code, 64)
        self.assertIn("unknown scheme", err)
        for args in (["serve", "zpull://127.0.0.1:1", "--synthetic", "f4:3"], ["monitor", "zpush://127.0.0.1:1"],
                     ["stat", "zpush://127.0.0.1:1"]):
            with self.subTest(args=args):
                code, _, err = finish(start(*args, "--timeout", "1"))
                self.assertEqual(code, 64, err)
                self.assertIn("bad_url", err)
                self.assertRegex(err, rf"makes a [a-z]+ socket, which tenbin {args[0]} cannot use; it takes "
                                      r"[a-z]+(, [a-z]+)* or [a-z]+ sockets\n$")

    def test_pair_commands_meet_on_a_plain_endpoint(self):
        # A receiving PAIR binds (as recv's always has), a sending one connects.
        for receiver in ("recv", "monitor", "stat"):
            with self.subTest(receiver=receiver):
                endpoint = free_tcp_endpoint()
                r = start(receiver, endpoint, "--socket", "pair", "--count", "2", "--timeout", "20", "--json")
                code, _, err = finish(start("serve", endpoint, "--socket", "pair", "--synthetic", "f4:3",
                                            "--count", "2", "--timeout", "5", "--report", "0"))
                self.assertEqual(code, 0, err)
                code, out, err = finish(r)
                self.assertEqual(code, 0, err)
                self.assertTrue(out, err)

    def test_an_address_in_use_is_named(self):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as holder:
            holder.bind(("127.0.0.1", 0))
            holder.listen()
            port = holder.getsockname()[1]
            for args in (["serve", f"zrpush://127.0.0.1:{port}", "--synthetic", "f4:3"],
                         ["monitor", f"zrsub://127.0.0.1:{port}"], ["stat", f"zrsub://127.0.0.1:{port}"],
                         ["recv", f"zpull://127.0.0.1:{port}"]):
                with self.subTest(command=args[0]):
                    r = run(*args, "--timeout", "1")
                    self.assertEqual(r.returncode, 1, r.stderr)
                    self.assertIn(f"cannot bind to tcp://127.0.0.1:{port}: Address already in use".encode(),
                                  r.stderr)
                    self.assertIn(b"io_error", r.stderr)

    def test_urls_as_tensorcom_spells_them(self):
        # The #topic of zpub and zsub: a frame in front, filtered on; scheme case ignored.
        port = free_port()
        receiver = start("recv", f"ZSUB://127.0.0.1:{port}#train", "--count", "2", "--json", "--timeout", "20")
        code, _, err = finish(start("send", f"zpub://127.0.0.1:{port}#train", "--file", vec("i4_i8.ten"),
                                    "--count", "2", "--delay", "1"))
        self.assertEqual(code, 0, err)
        code, out, err = finish(receiver)
        self.assertEqual(code, 0, err)
        for line in out.splitlines():
            self.assertEqual(json.loads(line)["tensors"], expected_tensors(BY_PATH["i4_i8.ten"]))
        # A subscriber of another topic gets nothing.
        port = free_port()
        other = start("recv", f"zsub://127.0.0.1:{port}#eval", "--count", "1", "--timeout", "3")
        finish(start("send", f"zpub://127.0.0.1:{port}#train", "--file", vec("i4_i8.ten"), "--delay", "1"))
        self.assertEqual(finish(other)[0], 2)
        # What tensorcom would drop silently is refused, saying so.
        for url, words in ((f"zpush://127.0.0.1:{port}/feed", "tensorcom would ignore it and use tcp://127.0.0.1"),
                           (f"zpush://127.0.0.1:{port}?hwm=5", "tensorcom would drop it silently"),
                           (f"zpush://127.0.0.1:{port}#t", "a #topic is for pub and sub sockets")):
            with self.subTest(url=url):
                r = run("send", url, "--file", vec("i4_i8.ten"))
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertIn(words.encode(), r.stderr)


if __name__ == "__main__":
    sys.exit(main())
