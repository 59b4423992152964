#!/usr/bin/env python3
"""Per-call time of compiled graphs without view inputs, stock vs the series.

The series must cost nothing there: a graph that writes and donates nothing is
compiled as it is, and one that does pays one check per call. Each round runs
a child process on stock (`tools/apply_and_test.sh --unpatched`) and one on
the series, alternately; each child times every graph (median of --calls
calls, no sync in between); the table gives the median over rounds.

  tools/bench_no_views.py [--rounds 5] [--calls 400] [--json FILE]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import time

TOOLS = os.path.dirname(os.path.abspath(__file__))


def graphs():
  """(name, compiled function, arguments) of graphs without view inputs."""
  import torch
  import torch_xla
  device = torch_xla.device()
  a = torch.randn(64, 64, device=device)
  cache = torch.zeros(64, 64, device=device)
  slots, rows = torch.tensor([1, 2], device=device), torch.ones(2, 64).to(device)

  def write(cache, slots, rows):
    torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
    cache.index_copy_(0, slots, rows)

  mlp = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
  mlp = mlp.to(device)
  weights = [torch.randn(64, 64, device=device) for _ in range(16)]
  return [
      ('matmul', torch.compile(lambda a, b: a @ b, backend='openxla'), (a, a)),
      ('donated index_copy_', torch.compile(write, backend='openxla'),
       (cache, slots, rows)),
      ('8-layer MLP forward', torch.compile(mlp, backend='openxla'), (a,)),
      ('16 inputs, in-place add',
       torch.compile(lambda *ws: [w.add_(1) for w in ws][0], backend='openxla'),
       weights),
  ]


def child(calls):
  import torch_xla
  import torch_xla.core.xla_model as xm
  result = {}
  for name, fn, args in graphs():
    for _ in range(20):
      fn(*args)
    torch_xla.sync()
    xm.wait_device_ops()
    times = []
    for _ in range(calls):
      start = time.perf_counter()
      fn(*args)
      times.append(time.perf_counter() - start)
    torch_xla.sync()
    xm.wait_device_ops()
    result[name] = statistics.median(times) * 1e6
  print(json.dumps(result))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--rounds', type=int, default=5)
  parser.add_argument('--calls', type=int, default=400)
  parser.add_argument('--json', help='write the table to this file')
  parser.add_argument('--child', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    return child(args.calls)
  runs = {'stock': [], 'series': []}
  for _ in range(args.rounds):
    for build, flags in (('stock', ['--unpatched']), ('series', [])):
      out = subprocess.run([
          f'{TOOLS}/apply_and_test.sh', *flags, '--run', 'python', __file__,
          '--child', '--calls',
          str(args.calls)
      ],
                           capture_output=True,
                           text=True,
                           check=True).stdout
      runs[build].append(json.loads(out.splitlines()[-1]))
  rows = []
  print('| graph | stock µs/call | series µs/call | series / stock |')
  print('| --- | --- | --- | --- |')
  for name in runs['stock'][0]:
    stock, series = (statistics.median(r[name] for r in runs[b])
                     for b in ('stock', 'series'))
    rows.append(dict(graph=name, stock=stock, series=series))
    print(f'| {name} | {stock:.1f} | {series:.1f} | {series / stock:.3f} |')
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(dict(rounds=args.rounds, calls=args.calls, rows=rows), f, indent=1)


if __name__ == '__main__':
  main()
