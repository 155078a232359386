#!/usr/bin/env python3
"""`tenbin` itself: its commands, --help, --version, wrong arguments and suggestions,
number options checked alike in every command, output that cannot be written."""

import os
import re
import sys

from support import vec, run, start, finish, free_port, CliTest, main


class Main(CliTest):
    def test_help_names_every_command(self):
        r = run("--help")
        self.assertEqual(r.returncode, 0)
        for word in (b"info", b"send", b"recv", b"convert"):
            self.assertIn(word, r.stdout)
        for cmd in ("info", "send", "recv"):
            r = run(cmd, "--help")
            self.assertEqual(r.returncode, 0)
            self.assertIn(b"Usage: tenbin " + cmd.encode(), r.stdout)

    def test_version_is_the_projects(self):
        # The version meson.build declares, not one written into the tool.
        with open(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "meson.build")) as f:
            version = re.search(r"version:\s*'([^']+)'", f.read()).group(1)
        r = run("--version")
        self.assertEqual(r.returncode, 0, r.stderr)
        self.assertEqual(r.stdout.strip(), b"tenbin " + version.encode())

    def test_bad_arguments_fail_with_a_message(self):
        for args in ([], ["info"], ["nonsense"], ["send", "tcp://127.0.0.1:1"],
                     ["recv", "tcp://127.0.0.1:1", "--count", "-1"],
                     ["recv", "tcp://127.0.0.1:1", "--socket", "push"],
                     ["send", "tcp://127.0.0.1:1", "-f", "x", "--bind", "--connect"]):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 64, r.stderr)  # EX_USAGE, whatever was wrong
                self.assertNotEqual(r.stderr, b"")
        r = run("nonsense")
        self.assertIn(b"unknown command 'nonsense'", r.stderr)
        r = run("--bogus")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"unknown option '--bogus'", r.stderr)

    def test_output_that_cannot_be_written_is_a_failure(self):
        with open("/dev/full", "wb") as full:
            code, _, err = finish(start("info", "--json", vec("f4_matrix.ten"), stdout=full))
        self.assertEqual(code, 1, err)
        self.assertIn("writing to standard output failed", err)

    def test_number_options_of_every_command_are_checked(self):
        # Refused as recv has always refused a negative timeout: the usage
        # status, naming the option. NaN is no number.
        usage = run("recv", "tcp://127.0.0.1:1", "--timeout", "-1").returncode
        self.assertEqual(usage, 64)
        port = free_port()
        cases = [
            (["send", f"zpush://127.0.0.1:{port}", "-f", vec("f4_matrix.ten")],
             [("--count", "-1"), ("--delay", "-1"), ("--timeout", "-1"), ("--timeout", "nan"), ("--linger", "-1"),
              ("--heartbeat", "-1"), ("--heartbeat", "nan")]),
            (["recv", f"zpull://127.0.0.1:{port}"], [("--count", "-1"), ("--timeout", "nan")]),
            (["serve", f"zpush://127.0.0.1:{port}", "--synthetic", "f4:3"],
             [("--count", "-1"), ("--rate", "-5"), ("--delay", "-2"), ("--timeout", "-1"), ("--timeout", "nan"),
              ("--report", "-1"), ("--heartbeat", "-1")]),
            (["monitor", f"zsub://127.0.0.1:{port}"],
             [("--interval", "0"), ("--interval", "-1"), ("--interval", "nan"), ("--count", "-1"),
              ("--timeout", "-1")]),
            (["stat", f"zsub://127.0.0.1:{port}"],
             [("--count", "-1"), ("--timeout", "-1"), ("--timeout", "nan")]),
        ]
        for command, bad in cases:
            for option, value in bad:
                with self.subTest(command=command[0], option=option, value=value):
                    r = run(*command, option, value, timeout=10)
                    self.assertEqual(r.returncode, usage, r.stderr)
                    self.assertIn(option.encode(), r.stderr)

    def test_a_mistyped_command_or_option_gets_a_suggestion(self):
        r = run("sned", "x")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"did you mean 'send'?", r.stderr)
        r = run("recv", "zpull://127.0.0.1:1", "--jsn")
        self.assertEqual(r.returncode, 64)
        self.assertIn(b"--jsn: did you mean --json?", r.stderr)
        r = run("stat", "--cuont", "3")
        self.assertIn(b"did you mean --count?", r.stderr)
        self.assertNotIn(b"did you mean", run("nonsense").stderr)

    def test_every_mistyped_command_gets_a_suggestion(self):
        # Another case, a prefix, a longer word, tensorcom's name, a misspelling.
        for word, meant in (("SEND", "'send'"), ("Info", "'info'"), ("s", "'send', 'serve', 'stat' or 'show'"),
                            ("st", "'stat'"), ("statistics", "'stat'"), ("monitoring", "'monitor'"),
                            ("tensormon", "'monitor'"), ("tensorshow", "'show'"), ("receive", "'recv'"),
                            ("recieve", "'recv'"), ("conver", "'convert'"), ("kegen", "'keygen'")):
            with self.subTest(word=word):
                r = run(word, "x")
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertIn(f"unknown command '{word}'; did you mean {meant}? The commands are".encode(), r.stderr)

    def test_a_mistyped_required_option_gets_a_suggestion(self):
        # CLI11 stops at the option that is missing; the one typed instead is named too.
        for args, typed, meant in ((["send", "tcp://127.0.0.1:1", "--fiel", "x.ten"], "--fiel", "--file"),
                                   (["show", "x.ten", "--ot", "x.png"], "--ot", "--out"),
                                   (["show", "x.ten", "--out=x.png", "--cuont=2"], "--cuont", "--count"),
                                   (["info", "--jsno"], "--jsno", "--json")):
            with self.subTest(args=args):
                r = run(*args)
                self.assertEqual(r.returncode, 64, r.stderr)
                self.assertIn(f"tenbin {args[0]}: {typed}: did you mean {meant}?".encode(), r.stderr)
        # An operand after "--" is no option.
        r = run("info", "--", "--jsno")
        self.assertNotIn(b"did you mean", r.stderr)


if __name__ == "__main__":
    sys.exit(main())
