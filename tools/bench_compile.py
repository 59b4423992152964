#!/usr/bin/env python3
"""Compile-time and decode-step benchmark: a compiled per-layer KV write in a
decoder loop over L layers, with fresh argument tensors at every call.

A layer's call writes T tokens into its K and V caches with vLLM's pattern
(`kc.flatten(0, 1).index_copy_(0, slots, k)`), reads 16 rows of each back and
returns them, as attention does; the caches are marked as buffer donors with
`--donate`.  How the caches reach the call (--layouts):

  sep      two tensors a layer (what vLLM and transformers allocate)
  kept     views of one pool (L, 2, ...), `kept = [tuple(pool[l]) ...]` once
  retaken  views of one pool taken again at every call: `k, v = pool[l]`
  report   a (2, ...) tensor a layer, `key_cache, value_cache = kv_cache` at
           every call (pytorch/xla#8832)

`--views 1` passes a layer's (2, ...) cache and splits it inside: a tensor a
layer (sep, report), or the pool's `pool[l]` (kept, retaken).  `--live N`
keeps N more XLA tensors alive beside the loop, as a model's weights are;
each layout holds only its own caches.
`--peer` runs each layout on the CPU too, with backend="aot_eager" and
"inductor": PyTorch's own handling of aliased inputs, the cost to compare.
Each configuration runs in a child process and prints, in ms: `first`, the
first step (Dynamo + AOTAutograd + bridge + XLA compiles, then a sync),
`shape2`, the first step with another token count, and `warm`, the fastest
step after warm-up (every layer's call, torch_xla.sync(), wait), with the XLA
executions a warm step makes.  Timings here move by half from run to run:
`--rounds` runs every configuration of every build once a round, in turn,
and the table gives each one's minimum over the rounds.  `--json` writes the
rows.

  tools/apply_and_test.sh --run python tools/bench_compile.py --rounds 5 \\
      --stock "$(tools/apply_and_test.sh --unpatched --run printenv PYTHONPATH)" \\
      --peer --json compile.json
"""
import argparse
import itertools
import json
import os
import subprocess
import sys
import time

BLOCKS, BLOCK, HEADS, DIM = 64, 16, 4, 32


def child(layout, layers, views, donate, steps, live, backend):
  import torch
  if backend == 'openxla':
    import torch_xla
    import torch_xla.debug.metrics as met
    dev, sync = torch_xla.device(), torch_xla.sync
    donor = torch.ops.xla.dynamo_set_buffer_donor_
    executed = lambda: (met.metric_data('ExecuteTime') or [0])[0]
  else:  # the peer: PyTorch's own stack on the CPU
    dev, sync, donate, executed = 'cpu', lambda: None, False, lambda: 0
  shape = (BLOCKS, BLOCK, HEADS, DIM)

  def write(kc, vc, k, v, slots):
    if donate:
      donor(kc, True)
      donor(vc, True)
    kc.flatten(0, 1).index_copy_(0, slots, k)
    vc.flatten(0, 1).index_copy_(0, slots, v)
    return kc.flatten(0, 1)[:16] + vc.flatten(0, 1)[:16]

  def write_layer(cache, k, v, slots):
    kc, vc = cache
    return write(kc, vc, k, v, slots)

  fn = torch.compile(write if views == 2 else write_layer, backend=backend)
  # Each layout holds its own caches only, as its program would: the sync
  # before a donating call walks every live tensor.
  if layout in ('kept', 'retaken'):
    pool = torch.zeros((layers, 2) + shape, device=dev)
    kept = [pool[l] if views == 1 else tuple(pool[l]) for l in range(layers)]
  elif layout == 'sep' and views == 2:
    caches = [(torch.zeros(shape, device=dev), torch.zeros(shape, device=dev))
              for _ in range(layers)]
  else:  # a (2, ...) tensor a layer
    per_layer = [torch.zeros((2,) + shape, device=dev) for _ in range(layers)]
  weights = [torch.zeros(4, device=dev) + i for i in range(live)]
  sync()

  def layer_caches(l):
    """What layer l passes: its (2, ...) cache, or its K and V caches."""
    if layout == 'kept':
      return kept[l]
    if layout == 'retaken':
      return pool[l] if views == 1 else tuple(pool[l])
    if layout == 'sep' and views == 2:
      return caches[l]
    if views == 1:
      return per_layer[l]
    key_cache, value_cache = per_layer[l]  # the report's pattern
    return key_cache, value_cache

  def layer(l, tokens, n):
    # Fresh inputs from the host, as a server's are: device data; the views
    # are the layer's locals, as in an attention layer's forward.
    k = torch.randn(tokens, HEADS, DIM).to(dev)
    v = torch.randn(tokens, HEADS, DIM).to(dev)
    slots = (torch.arange(tokens) + (n * tokens) % 512).to(dev)
    caches_of_l = layer_caches(l)
    if views == 1:
      return fn(caches_of_l, k, v, slots)
    return fn(*caches_of_l, k, v, slots)

  def step(tokens, n):
    for l in range(layers):
      layer(l, tokens, n)
    sync()
    if backend == 'openxla':
      torch_xla._XLAC._xla_wait_device_ops([])

  def timed(tokens, n):
    start = time.perf_counter()
    step(tokens, n)
    return (time.perf_counter() - start) * 1e3

  first = timed(2, 0)
  shape2 = timed(3, 1)
  for n in range(2, 12):
    step(2, n)
  before = executed()
  times = [timed(2, n) for n in range(12, 12 + steps)]
  print(
      json.dumps(
          dict(first=first,
               shape2=shape2,
               warm=min(times),
               executions=(executed() - before) / steps,
               live=len(weights))))


def run_child(config, steps, pythonpath=None):
  env = dict(os.environ, PJRT_DEVICE='CPU')
  if pythonpath is not None:
    env['PYTHONPATH'] = pythonpath
  out = subprocess.run(
      [sys.executable, __file__, '--child', *config, '--steps',
       str(steps)],
      capture_output=True,
      text=True,
      env=env)
  if out.returncode:
    print(f'{config}: {out.stderr.strip().splitlines()[-1:]}', file=sys.stderr)
    return None
  return json.loads(out.stdout.strip().splitlines()[-1])


def plot(table, path):
  """First call and warm step (ms) by layers, a line per layout and build."""
  import matplotlib
  matplotlib.use('Agg')
  import matplotlib.pyplot as plt
  fig, axes = plt.subplots(1, 2, figsize=(11, 4))
  lines = sorted({(r['torch_xla'], r['layout'], r['views'], r['donate'])
                  for r in table
                  if r['runs']})
  for ax, key, title in zip(axes, ('first', 'warm'),
                            ('first call (compile + run)', 'warm step')):
    for line in lines:
      pts = sorted((r['layers'], r[key])
                   for r in table
                   if r['runs'] and (r['torch_xla'], r['layout'], r['views'],
                                     r['donate']) == line)
      ax.plot(*zip(*pts),
              marker='o',
              linestyle='--' if line[0] == 'stock' else '-',
              label=f'{line[0]} {line[1]}')
    ax.set(xlabel='layers (one compiled call each)', ylabel='ms', title=title)
    ax.set_xscale('log', base=2)
    ax.set_yscale('log')
    ax.grid(alpha=0.3)
  axes[0].legend(fontsize=8)
  fig.tight_layout()
  fig.savefig(path, dpi=100)


def main():
  p = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  p.add_argument('--layouts', default='sep,kept,retaken,report')
  p.add_argument('--layers', default='8,32')
  p.add_argument('--views', default='2', help='1, 2 or 1,2')
  p.add_argument('--donate', default='yes', help='yes, no or yes,no')
  p.add_argument('--steps', type=int, default=100)
  p.add_argument('--rounds', type=int, default=1)
  p.add_argument(
      '--stock',
      help='PYTHONPATH of a stock torch_xla (`tools/apply_and_test.sh '
      '--unpatched --run printenv PYTHONPATH`): each configuration runs there '
      'too, interleaved, and the table gives the ratios to stock on `sep`')
  p.add_argument('--live', type=int, default=0)
  p.add_argument('--peer', action='store_true')
  p.add_argument('--json')
  p.add_argument('--plot',
                 help='write a PNG of the first call and warm step by layers')
  p.add_argument('--results',
                 help='print and plot these saved results, run nothing')
  p.add_argument('--child', nargs=6, help=argparse.SUPPRESS)
  a = p.parse_args()
  if a.child:
    layout, layers, views, donate, live, backend = a.child
    return child(layout, int(layers), int(views), donate == 'yes', a.steps,
                 int(live), backend)
  configs = list(
      itertools.product(a.layouts.split(','), a.layers.split(','),
                        a.views.split(','), a.donate.split(','),
                        [str(a.live)]))
  # variant: (the torch_xla it runs on, its backend)
  variants = dict(series=(None, 'openxla'))
  if a.stock:
    variants['stock'] = (a.stock, 'openxla')
  if a.peer:
    variants.update(aot_eager=(None, 'aot_eager'), inductor=(None, 'inductor'))
  runs = {(c, v): [] for c in configs for v in variants}
  for _ in range(0 if a.results else a.rounds):
    for c in configs:
      for v, (pythonpath, backend) in variants.items():
        runs[c, v].append(run_child((*c, backend), a.steps, pythonpath))
  keys = ('first', 'shape2', 'warm', 'executions')
  table = []
  if a.results:
    with open(a.results) as f:
      table = json.load(f)
    runs = {}
  for (c, variant), results in runs.items():
    ok = [r for r in results if r]
    if results:
      table.append(
          dict(layout=c[0],
               layers=int(c[1]),
               views=int(c[2]),
               donate=c[3],
               live=int(c[4]),
               torch_xla=variant,
               runs=len(ok),
               **{k: min(r[k] for r in ok) for k in keys if ok}))
  # Each row's ratio to separate tensors: on stock for torch_xla's rows, on
  # the same backend for the peer's.
  sep = {(r['torch_xla'], r['layers'], r['views'], r['donate'], r['live']): r
         for r in table
         if r['layout'] == 'sep' and r['runs']}
  print('variant   layout   L views donate live  first ms  shape2 ms  '
        'warm ms  exec/step  / sep: first shape2  warm')
  for r in table:
    row = (f"{r['torch_xla']:9} {r['layout']:8} {r['layers']:>2} "
           f"{r['views']:>5} {r['donate']:>6} {r['live']:>4}")
    if not r['runs']:
      print(f'{row}  error')
      continue
    row += (f" {r['first']:9.0f} {r['shape2']:10.0f} {r['warm']:8.2f} "
            f"{r['executions']:10.1f}")
    own = r['torch_xla'] in ('aot_eager', 'inductor')
    ref = sep.get((r['torch_xla'] if own else 'stock', r['layers'],
                   r['views'], r['donate'], r['live']))
    if ref:
      r.update({f'{k}_vs_sep': r[k] / ref[k] for k in keys[:3]})
      row += (f"  {r['first_vs_sep']:11.2f} {r['shape2_vs_sep']:6.2f} "
              f"{r['warm_vs_sep']:5.2f}")
    print(row)
  if a.json:
    with open(a.json, 'w') as f:
      json.dump(table, f, indent=1)
  if a.plot:
    plot(table, a.plot)
    print(f'plot: {a.plot}')


if __name__ == '__main__':
  main()
