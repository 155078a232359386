#!/usr/bin/env python3
"""`tenbin monitor`: rates, layouts, timeouts, tensormon's default URL."""

import json
import sys
import time

from support import run, start, finish, free_port, CliTest, main


class Monitor(CliTest):
    def test_monitor_reports_rate_and_layout(self):
        port = free_port()
        monitor = start("monitor", f"zpull://127.0.0.1:{port}", "--count", "12", "--json", "--interval", "0.2",
                        "--timeout", "20")
        self.succeeds("serve", f"zpush://127.0.0.1:{port}", "--synthetic", "x=u1:1000;y=f4:10",
                      "--count", "12", "--rate", "20", "--report", "0")
        code, out, err = finish(monitor)
        self.assertEqual(code, 0, err)
        reports = [json.loads(line) for line in out.splitlines()]
        self.assertGreaterEqual(len(reports), 2)
        self.assertEqual(reports[-1]["messages"], 12)
        self.assertEqual(reports[-1]["malformed"], 0)
        self.assertEqual(reports[-1]["tensors"], [{"info": "x", "dtype": "u1", "shape": [1000]},
                                                  {"info": "y", "dtype": "f4", "shape": [10]}])
        # 20 msg/s of 1040 bytes: any report with messages shows a plausible rate.
        rates = [r["rate"] for r in reports if r["rate"] > 0]
        self.assertTrue(rates and max(rates) < 200, reports)

    def test_monitor_times_out_with_status_2(self):
        code, _, err = finish(start("monitor", f"zpull://127.0.0.1:{free_port()}", "--interval", "0.1",
                                    "--timeout", "0.5"))
        self.assertEqual(code, 2, err)
        self.assertIn("timeout", err)

    def test_monitor_times_out_on_time_whatever_the_interval(self):
        t0 = time.monotonic()
        code, out, err = finish(start("monitor", f"zpull://127.0.0.1:{free_port()}", "--interval", "10",
                                      "--timeout", "0.5"))
        self.assertEqual(code, 2, err)
        self.assertLess(time.monotonic() - t0, 5)
        self.assertEqual(len(out.splitlines()), 1, out)

    def test_monitor_and_stat_default_to_tensormons_url(self):
        for command in ("monitor", "stat"):
            with self.subTest(command=command):
                self.assertIn(b"zsub://127.0.0.1:7880", run(command, "--help").stdout)
                # No URL is no usage error: it waits on the default, then times out.
                r = run(command, "--count", "1", "--timeout", "0.3")
                self.assertEqual(r.returncode, 2, r.stderr)


if __name__ == "__main__":
    sys.exit(main())
