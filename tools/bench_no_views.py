#!/usr/bin/env python3
"""Per-call time of compiled graphs without view inputs, stock vs the series.

The series must cost nothing there: a graph that writes and donates nothing is
compiled as it is, and one that does pays one check per call. Both run in one
process on the series' tree, so that process-to-process noise drops out: each
graph is compiled twice, once by backend="openxla" (the series) and once by
torch's stock AOTAutograd backend with stock's own dynamo_bridge.py (read from
the unpatched tree, `tools/apply_and_test.sh --unpatched`). Each round times
--calls calls of each, alternating (no sync in between), and takes the
median; the table gives the median over rounds and the rounds' range. The
donating call is timed again with rows made at every call (outside the
timer), and both again beside --live other live tensors, none pending: the
series looks for pending tensors when a tensor was made since its last call.

  tools/bench_no_views.py [--rounds 9] [--calls 400] [--live 10,1000,5000]
                          [--json FILE]
"""
import argparse
import importlib.util
import json
import os
import statistics
import subprocess
import time
import types
from unittest import mock

TOOLS = os.path.dirname(os.path.abspath(__file__))


def graphs():
  """(name, function, arguments) of graphs without view inputs."""
  import torch
  import torch_xla
  device = torch_xla.device()
  a = torch.randn(64, 64, device=device)
  cache = torch.zeros(64, 64, device=device)
  slots = torch.tensor([1, 2], device=device)
  rows = torch.ones(2, 64).to(device)

  def write(cache, slots, rows):
    torch.ops.xla.dynamo_set_buffer_donor_(cache, True)
    cache.index_copy_(0, slots, rows)

  mlp = torch.nn.Sequential(*[torch.nn.Linear(64, 64) for _ in range(8)])
  mlp = mlp.to(device)
  weights = [torch.randn(64, 64, device=device) for _ in range(16)]

  def new_rows():  # as a decoder's next token: made between calls
    return cache, slots, rows.cpu().to(device)

  return [
      ('matmul', lambda a, b: a @ b, (a, a)),
      ('donated index_copy_', write, (cache, slots, rows)),
      ('donated index_copy_, rows made at every call', write, new_rows),
      ('8-layer MLP forward', lambda a: mlp(a), (a,)),
      ('16 inputs, in-place add', lambda *ws: [w.add_(1) for w in ws][0],
       weights),
  ]


def own_code(fn):
  return types.FunctionType(fn.__code__.replace(), fn.__globals__, fn.__name__,
                            fn.__defaults__, fn.__closure__)


def child(stock_bridge, rounds, calls, lives):
  import torch
  import torch_xla
  import torch_xla.core.dynamo_bridge
  import torch_xla.core.xla_model as xm
  from torch._dynamo.backends import torchxla
  spec = importlib.util.spec_from_file_location('stock_dynamo_bridge',
                                                stock_bridge)
  stock = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(stock)
  result = {}
  entries = [(name, fn, args, 0) for name, fn, args in graphs()]
  entries += [
      (f'{name}, {live} live tensors', fn, args, live)
      for live in lives  # the donating calls, beside live tensors
      for name, fn, args, _ in entries
      if name.startswith('donated')
  ]
  for name, fn, args, live in entries:
    # timed beside `live` other live tensors
    alive = [torch.zeros(2, device=torch_xla.device()) for _ in range(live)]
    torch_xla.sync()  # none pending
    make = args if callable(args) else lambda args=args: args
    args = make()
    # A code object of its own each: Dynamo caches graphs per code object.
    series = torch.compile(own_code(fn), backend='openxla')
    # torch's stock backend, its bridge stock's (torch imports it by name).
    baseline = torch.compile(own_code(fn), backend=torchxla.openxla_aot)
    with mock.patch.object(torch_xla.core, 'dynamo_bridge', stock), \
        mock.patch.object(stock, 'extract_compiled_graph',
                          wraps=stock.extract_compiled_graph) as extract:
      baseline(*args)
    assert extract.called, f'{name}: not compiled by {stock_bridge}'
    for _ in range(20):
      series(*args)
      baseline(*args)
    torch_xla.sync()
    xm.wait_device_ops()
    medians = {'stock': [], 'series': []}
    for _ in range(rounds):
      times = {'stock': [], 'series': []}
      for i in range(calls):
        pair = [('stock', baseline), ('series', series)]
        for build, f in pair[::1 - 2 * (i % 2)]:
          args = make()
          start = time.perf_counter()
          f(*args)
          times[build].append(time.perf_counter() - start)
      torch_xla.sync()
      xm.wait_device_ops()
      for build in medians:
        medians[build].append(statistics.median(times[build]) * 1e6)
    result[name] = medians
  print(json.dumps(result))


def main():
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--rounds', type=int, default=9)
  parser.add_argument('--calls', type=int, default=400)
  parser.add_argument(
      '--live',
      type=lambda s: [int(n) for n in s.split(',') if n],
      default=[10, 1000, 5000],
      help='time the donating calls again beside this many live tensors')
  parser.add_argument('--json', help='write the table to this file')
  parser.add_argument('--child', help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    return child(args.child, args.rounds, args.calls, args.live)

  def run(*command, flags=()):
    return subprocess.run(
        [f'{TOOLS}/apply_and_test.sh', *flags, '--run', *command],
        capture_output=True,
        text=True,
        check=True).stdout.splitlines()[-1]

  stock_bridge = run('python',
                     '-c', 'import torch_xla._dynamo.dynamo_bridge as b; '
                     'print(b.__file__)',
                     flags=['--unpatched'])
  runs = json.loads(
      run('python', __file__, '--child', stock_bridge, '--rounds',
          str(args.rounds), '--calls', str(args.calls), '--live',
          ','.join(map(str, args.live))))
  rows = []
  print('| graph | stock µs/call | series µs/call | series / stock '
        '(median, rounds\' range) |')
  print('| --- | --- | --- | --- |')
  for name, medians in runs.items():
    stock, series = (statistics.median(medians[b]) for b in ('stock', 'series'))
    ratios = [s / b for s, b in zip(medians['series'], medians['stock'])]
    rows.append(dict(graph=name, stock=stock, series=series, rounds=medians))
    print(f'| {name} | {stock:.1f} | {series:.1f} | {series / stock:.3f} '
          f'({min(ratios):.3f}..{max(ratios):.3f}) |')
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(dict(rounds=args.rounds, calls=args.calls, rows=rows),
                f,
                indent=1)


if __name__ == '__main__':
  main()
