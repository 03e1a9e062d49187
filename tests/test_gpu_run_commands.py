#!/usr/bin/env python3
"""tools/gpu_run.sh's `vkgate bench` command lines against this build's CLI
(run: python3 tests/test_gpu_run_commands.py path/to/vkgate).

The script runs only on a lent GPU, a few minutes a session: a flag the CLI
renamed or a value it no longer takes would cost a whole step there. Each bench
line of the script is run here with a device no selector matches, so the CLI
parses and checks every flag and then stops at the device: exit 1 with the
selector's error passes, anything else (exit 2: bad usage) fails, naming the
script's line. The loop variables of those lines take one of their values
below; a line with a variable this list lacks fails, asking for one.
"""
import os
import re
import shlex
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
SCRIPT = os.path.join(os.path.dirname(HERE), "tools", "gpu_run.sh")
NO_DEVICE = "no device is named this"
# A value each loop variable of the bench lines takes in the script.
SAMPLES = {
    '"${tiles[@]}"': "--tiles all", "$1": "4096", "$2": "16", "$3": "2", "$4": "256", "$T": "512",
    "$args": "--past 32768 --T 1", "$k": "40", "$m": "1", "$p": "fp16", "$q": "q4_k",
}
SHELL_ENDS = {"|", ">", ">>", "2>", "2>>", "2>&1", "&&", "||", ";", "}", ")"}


def bench_lines():
    """(line number, arguments after `bench`) of every `$cli bench` / `$bin bench`."""
    lines = open(SCRIPT).read().split("\n")
    number = 0
    while number < len(lines):
        first = number + 1
        text = lines[number]
        while text.endswith("\\") and number + 1 < len(lines):
            number += 1
            text = text[:-1] + " " + lines[number].strip()
        number += 1
        match = re.search(r"\$(?:cli|bin) bench (.*)", text)
        if match:
            yield first, match.group(1)


def arguments(rest):
    rest = rest.replace('"${tiles[@]}"', SAMPLES['"${tiles[@]}"'])
    rest = re.sub(r"\$(\w+)", lambda m: SAMPLES.get(m.group(0), m.group(0)), rest)
    args = []
    for token in shlex.split(rest):
        if token in SHELL_ENDS or token.startswith((">", "2>")):
            break
        args.append(token)
    return args


def main():
    if len(sys.argv) != 2:
        print("usage: test_gpu_run_commands.py path/to/vkgate", file=sys.stderr)
        return 2
    cli = sys.argv[1]
    checked = failed = 0
    for number, rest in bench_lines():
        where = f"tools/gpu_run.sh:{number}"
        args = arguments(rest)
        unknown = [a for a in args if "$" in a]
        if unknown:
            print(f"FAIL {where}: {' '.join(unknown)} has no sample value in {os.path.basename(__file__)}'s SAMPLES")
            failed += 1
            continue
        if "--device" in args:
            args[args.index("--device") + 1] = NO_DEVICE
        else:
            args = ["--device", NO_DEVICE] + args
        run = subprocess.run([cli, "bench"] + args, capture_output=True, text=True, timeout=60)
        checked += 1
        if run.returncode != 1 or "device selector" not in run.stderr:
            print(f"FAIL {where}: vkgate bench {shlex.join(args)}\n  exit {run.returncode}: {run.stderr.strip()}")
            failed += 1
    print(f"{checked} bench lines of tools/gpu_run.sh checked, {failed} failed")
    if checked < 20:  # the script has over 30: a change to its form must not leave this check with nothing
        print("FAIL: fewer than 20 bench lines found: has the script's form changed?")
        return 1
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
