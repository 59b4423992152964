#!/usr/bin/env python3
"""Reproducer for pytorch/xla#8832, generalised.

The reported program writes a KV cache through views of one eager XLA tensor
inside torch.compile(backend="openxla"), with the views marked for buffer
donation; its function is taken from test/dynamo/test_dynamo_view_inputs.py
(test_reported_program), not copied.  This script runs its three steps
(compiled write, compiled write again, eager write) on two kinds of views of
one cache:

  unbind        key_cache, value_cache = kv_cache            (the report)
  view_reshape  kv_cache[0].view(N * H, D), kv_cache[1].reshape(N * H, D)
                (N = blocks * block size, H heads, D head size)

After every step it compares each view and the base with the same program run
eagerly on the CPU, and prints a table: step, tensor, ok / WRONG / crash.
Each scenario runs in a child process, so a crash that kills the process is
reported too.  Run it through the project's tool to pick the torch_xla:

  tools/apply_and_test.sh --unpatched --run python tools/repro_8832.py
  tools/apply_and_test.sh --run python tools/repro_8832.py

Exit status: 0 when every row is ok, 1 otherwise.
"""
import argparse
import json
import os
import subprocess
import sys
import traceback
import types

REPO_ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))

NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE = 128, 128, 4, 64
SCENARIOS = ('unbind', 'view_reshape')
STEPS = ('compiled', 'compiled again', 'eager')


def reported_program():
  """The function from the report, write_to_kv_cache, taken from the test
  that holds it (ViewInputsTest.test_reported_program in the repository's
  test/dynamo/test_dynamo_view_inputs.py) rather than written again here."""
  sys.path.insert(0, os.path.join(REPO_ROOT, 'test', 'dynamo'))
  import test_dynamo_view_inputs as tests
  # A function defined inside the test method: its code is a constant of the
  # method's code; it uses only module globals (torch).
  code = next(c for c in tests.ViewInputsTest.test_reported_program.__code__
              .co_consts if getattr(c, 'co_name', '') == 'write_to_kv_cache')
  return types.FunctionType(code, vars(tests))


def write_flat(key, value, key_flat, value_flat, slot_mapping):
  """The same write into caches already flattened to (rows, head size)."""
  import torch
  torch.ops.xla.dynamo_set_buffer_donor_(key_flat, True)
  torch.ops.xla.dynamo_set_buffer_donor_(value_flat, True)
  key_flat.index_copy_(0, slot_mapping, key.flatten(0, 2))
  value_flat.index_copy_(0, slot_mapping, value.flatten(0, 2))


def make_state(device, kv_init, slots):
  """The cache, its views and the inputs on `device`, as the report builds them."""
  import torch
  kv_cache = kv_init.to(device)
  kv = torch.linspace(-1, 1, 1 * 3 * 2 * NUM_KV_HEADS * HEAD_SIZE).reshape(
      1, 3, 2, NUM_KV_HEADS, HEAD_SIZE).to(device)
  key, value = kv.unbind(dim=2)
  return kv_cache, key, value, slots.to(device)


def views_of(scenario, kv_cache):
  if scenario == 'unbind':
    key_cache, value_cache = kv_cache
    return {'key_cache': key_cache, 'value_cache': value_cache}
  rows = NUM_BLOCKS * BLOCK_SIZE * NUM_KV_HEADS
  return {
      'kv_cache[0].view': kv_cache[0].view(rows, HEAD_SIZE),
      'kv_cache[1].reshape': kv_cache[1].reshape(rows, HEAD_SIZE),
  }


def run_child(scenario):
  """Runs one scenario, printing one JSON row per (step, tensor)."""
  import torch
  import torch_xla

  def emit(**row):
    print('ROW ' + json.dumps(row), flush=True)

  fn = reported_program() if scenario == 'unbind' else write_flat
  shape = (2, NUM_BLOCKS, BLOCK_SIZE, NUM_KV_HEADS, HEAD_SIZE)
  kv_init = torch.zeros(shape)
  slots = torch.arange(12, dtype=torch.long)
  device = torch_xla.device()

  xla_cache, key, value, slot_mapping = make_state(device, kv_init, slots)
  cpu_cache, cpu_key, cpu_value, cpu_slots = make_state('cpu', kv_init, slots)
  xla_views, cpu_views = views_of(scenario, xla_cache), views_of(
      scenario, cpu_cache)
  compiled = torch.compile(fn, backend='openxla', fullgraph=False,
                           dynamic=False)

  for step_index, step in enumerate(STEPS):
    # A different write each step, so that a stale step shows.
    key.mul_(step_index + 1)
    value.mul_(step_index + 1)
    cpu_key.mul_(step_index + 1)
    cpu_value.mul_(step_index + 1)
    try:
      xla_fn = compiled if step.startswith('compiled') else fn
      xla_fn(key, value, *xla_views.values(), slot_mapping)
      fn(cpu_key, cpu_value, *cpu_views.values(), cpu_slots)
      tensors = dict(xla_views, kv_cache=xla_cache)
      expected = dict(cpu_views, kv_cache=cpu_cache)
      for name, tensor in tensors.items():
        diff = (tensor.cpu() - expected[name]).abs().max().item()
        emit(step=step, tensor=name, status='ok' if diff == 0 else 'WRONG',
             detail='' if diff == 0 else f'max abs diff {diff:.3g}')
    except Exception as e:  # report and stop: later steps depend on this one
      frame = traceback.extract_tb(e.__traceback__)[-1]
      where = f'{os.path.basename(frame.filename)}:{frame.name}'
      message = (str(e).strip().splitlines() or [''])[0]
      emit(step=step, tensor='-', status='crash',
           detail=f'{type(e).__name__} in {where}: {message}'[:140])
      return


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--scenario', choices=SCENARIOS, action='append',
                      help='run only this scenario (repeatable)')
  parser.add_argument('--child', choices=SCENARIOS, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    run_child(args.child)
    return 0

  env = dict(os.environ)
  env.setdefault('PJRT_DEVICE', 'CPU')
  rows = []
  for scenario in args.scenario or SCENARIOS:
    proc = subprocess.run([sys.executable, __file__, '--child', scenario],
                          env=env, capture_output=True, text=True)
    got = [
        json.loads(line[4:])
        for line in proc.stdout.splitlines()
        if line.startswith('ROW ')
    ]
    for row in got:
      rows.append(dict(row, scenario=scenario))
    if proc.returncode != 0:
      reason = (f'killed by signal {-proc.returncode}'
                if proc.returncode < 0 else f'exit status {proc.returncode}')
      tail = proc.stderr.strip().splitlines()[-1:] or ['']
      rows.append(
          dict(scenario=scenario, step='-', tensor='-', status='crash',
               detail=f'process died: {reason}; {tail[0][:80]}'))

  import torch
  import torch_xla
  print(f'torch {torch.__version__}, torch_xla {torch_xla.__version__} '
        f'from {os.path.dirname(torch_xla.__file__)}')
  header = ('scenario', 'step', 'tensor', 'status', 'detail')
  widths = [max(len(str(r.get(h, ''))) for r in rows + [dict(zip(header, header))])
            for h in header]
  for r in [dict(zip(header, header))] + rows:
    print('  '.join(str(r.get(h, '')).ljust(w) for h, w in zip(header, widths))
          .rstrip())
  bad = [r for r in rows if r['status'] != 'ok']
  print(f'{len(rows) - len(bad)} ok, {len(bad)} not ok')
  return 1 if bad else 0


if __name__ == '__main__':
  sys.exit(main())
