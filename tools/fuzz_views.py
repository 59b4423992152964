#!/usr/bin/env python3
"""Differential fuzzer: torch.compile(backend="openxla") on views vs CPU eager.

Each program, made from a seed, takes one or two bases, random view chains on
them (select, narrow, unbind, transpose, flatten, view, t), passes some views
(and sometimes a base, or the same view twice) to a compiled function that
mutates them in place (add_, mul_, fill_, copy_, index_copy_), may mark them
with dynamo_set_buffer_donor_, returns nothing, a reduction or a view, and
runs for a few steps with eager mutations and reads in between.  After every
step every tensor (bases, views, clones, outputs) is compared with the same
program run eagerly on the CPU.

Every program is a standalone Python script: a failure is printed as that
script, shrunk to the fewest statements that still fail the same way.
Programs run in batches in child processes; a child that dies is counted
(`dead`) and the batch goes on in a new child.

Outcomes: ok, mismatch (silent wrong value), error (an exception that is not
the bridge's documented NotImplementedError), unsupported (that error), dead.

Run it through the project's tool to pick the torch_xla:
  tools/apply_and_test.sh --run python tools/fuzz_views.py --count 50
  tools/apply_and_test.sh --unpatched --run python tools/fuzz_views.py --count 50
  tools/apply_and_test.sh --run python tools/fuzz_views.py --long   # 1000
"""
import argparse
import collections
import json
import os
import random
import re
import subprocess
import sys
import types

HARNESS = '''
import torch
import torch_xla

DONATE = torch.ops.xla.dynamo_set_buffer_donor_


def values(*shape):
  return torch.arange(torch.Size(shape).numel(),
                      dtype=torch.float32).reshape(shape) / 7 - 1


def compare(step, xla, cpu):
  for name, expected in cpu.items():
    if not isinstance(expected, torch.Tensor):
      continue
    got = xla[name].cpu()
    if got.shape != expected.shape or not torch.allclose(
        got, expected, rtol=1e-5, atol=1e-5):
      diff = ((got - expected).abs().max().item()
              if got.shape == expected.shape else 'shape')
      raise AssertionError(
          f'MISMATCH after {step}: {name} differs from CPU eager ({diff})')


def run():
  xla, cpu = setup(torch_xla.device()), setup('cpu')
  compiled = torch.compile(fn, backend='openxla')
  for step, kind in enumerate(STEPS):
    if kind == 'compiled':
      xla[f'out{step}'] = compiled(*[xla[n] for n in ARGS])
      cpu[f'out{step}'] = fn(*[cpu[n] for n in ARGS])
    else:
      eager(xla)
      eager(cpu)
    compare(f'step {step} ({kind})', xla, cpu)
'''

MAIN = '''

if __name__ == '__main__':
  run()
  print('ok')
'''


class Program:
  """A random program, as the statements of a script."""

  def __init__(self, seed):
    self.seed = seed
    rng = random.Random(seed)
    self.setup = []  # statements of setup(device); names in self.shapes
    self.shapes = {}
    self.body = []  # statements of fn(*ARGS)
    self.eager = []  # statements of eager(t)
    self.exprs = {}  # view name -> its expression on a base
    bases = []
    for b in range(rng.choice((1, 1, 2))):
      shape = tuple(rng.randint(2, 5) for _ in range(rng.randint(2, 4)))
      name = f'base{b}'
      self.setup.append(f'{name} = values{shape}.to(device)')
      self.shapes[name] = shape
      bases.append(name)
    views = []
    for v in range(rng.randint(1, 3)):
      base = rng.choice(bases)
      expr, shape, contiguous = base, self.shapes[base], True
      for _ in range(rng.randint(1, 3)):
        op = self._view_op(rng, shape, contiguous)
        if op is None:
          break
        expr, shape, contiguous = op(expr, shape, contiguous)
      if expr == base:
        continue
      name = f'v{v}'
      self.setup.append(f'{name} = {expr}')
      self.exprs[name] = expr
      self.shapes[name] = shape
      views.append(name)
    if not views:
      name = 'v0'
      self.setup.append(f'{name} = {bases[0]}[0]')
      self.exprs[name] = f'{bases[0]}[0]'
      self.shapes[name] = self.shapes[bases[0]][1:]
      views.append(name)
    if rng.random() < 0.3:
      self._views_inside(rng, bases, views)
    else:
      self._views_passed(rng, bases, views)
    self.steps = ['compiled'] * rng.randint(1, 3)
    if rng.random() < 0.6:
      self.steps.insert(rng.randint(1, len(self.steps)), 'eager')
      name = rng.choice(bases + views)
      self.eager.append(
          rng.choice([
              f"t['{name}'].add_(1)", f"t['{name}'].mul_(-1)",
              f"t['read'] = t['{name}'] * 2"
          ]))
      self.setup.append('read = None')

  def _views_inside(self, rng, bases, views):
    """The bases are passed; fn takes the views of them itself."""
    used = sorted({self.exprs[v].split('.')[0].split('[')[0] for v in views})
    params = list(used)
    for name in views:
      self.setup.append(f'x_{name} = values{self.shapes[name]}.to(device)')
      self.shapes[f'x_{name}'] = self.shapes[name]
      params.append(f'x_{name}')
    self.args, self.params = list(params), params
    for name in used:
      if rng.random() < 0.6:
        self.body.append(f'DONATE({name}, True)')
    for _ in range(rng.randint(1, 4)):
      name = rng.choice(views)
      statement = self._mutation(rng, name, params)
      self.body.append(
          re.sub(rf'\b{name}\b(?!_)', f'({self.exprs[name]})', statement))
    if rng.random() < 0.3:
      self.body.append('return ' + ' + '.join(f'{b}.sum()' for b in used))

  def _views_passed(self, rng, bases, views):
    """Views (and sometimes a base) are passed to fn."""
    args = list(views)
    if rng.random() < 0.25:
      args.append(rng.choice(bases))
    rng.shuffle(args)
    # `params` names fn's parameters; ARGS names the tensors passed to them.
    params = list(args)
    if rng.random() < 0.1:  # the same tensor passed twice
      args.append(args[0])
      params.append(f'{args[0]}_again')
      self.shapes[params[-1]] = self.shapes[args[0]]
    # Extra inputs that give values to write.
    for name in sorted(set(args)):
      if rng.random() < 0.7:
        self.setup.append(f'x_{name} = values{self.shapes[name]}.to(device)')
        self.shapes[f'x_{name}'] = self.shapes[name]
        args.append(f'x_{name}')
        params.append(f'x_{name}')
    self.args, self.params = args, params
    if rng.random() < 0.3:
      name = rng.choice(views)
      self.setup.append(f'{name}_clone = {name}.clone()')
    mutable = [p for p in params if not p.startswith('x_')]
    for name in mutable:
      if rng.random() < 0.3:
        self.body.append(f'DONATE({name}, True)')
    for _ in range(rng.randint(1, 4)):
      name = rng.choice(mutable)
      self.body.append(self._mutation(rng, name, params))
    ret = rng.random()
    if ret < 0.3:
      self.body.append('return ' + ' + '.join(f'{a}.sum()' for a in mutable))
    elif ret < 0.5:
      name = rng.choice(mutable)
      self.body.append(f'return {name}[0]' if self.shapes[name] else
                       f'return {name}')

  @staticmethod
  def _view_op(rng, shape, contiguous):
    if not shape:
      return None
    choices = ['select', 'narrow', 'unbind']
    if len(shape) >= 2:
      choices += ['transpose', 't'] if len(shape) == 2 else ['transpose']
      if contiguous:
        choices += ['flatten', 'view']
    kind = rng.choice(choices)
    dim = rng.randrange(len(shape))
    if kind in ('select', 'unbind'):
      index = rng.randrange(shape[dim])
      expr = ('{}.select({}, {})' if kind == 'select' else '{}.unbind({})[{}]')
      new_shape = shape[:dim] + shape[dim + 1:]
      keeps = all(s == 1 for s in shape[:dim])
      return lambda e, s, c: (expr.format(e, dim, index), new_shape, c and
                              keeps)
    if kind == 'narrow':
      length = rng.randint(1, shape[dim])
      start = rng.randint(0, shape[dim] - length)
      new_shape = shape[:dim] + (length,) + shape[dim + 1:]
      keeps = length == shape[dim] or all(s == 1 for s in shape[:dim])
      return lambda e, s, c: (f'{e}.narrow({dim}, {start}, {length})',
                              new_shape, c and keeps)
    if kind in ('transpose', 't'):
      d0, d1 = (0, 1) if kind == 't' else rng.sample(range(len(shape)), 2)
      s = list(shape)
      s[d0], s[d1] = s[d1], s[d0]
      expr = '{}.t()' if kind == 't' else '{}.transpose({}, {})'
      return lambda e, _, c: (expr.format(e, d0, d1), tuple(s), False)
    if kind == 'flatten':
      start = rng.randrange(len(shape) - 1)
      end = rng.randrange(start + 1, len(shape))
      n = 1
      for size in shape[start:end + 1]:
        n *= size
      new_shape = shape[:start] + (n,) + shape[end + 1:]
      return lambda e, s, c: (f'{e}.flatten({start}, {end})', new_shape, c)
    n = 1
    for size in shape:
      n *= size
    return lambda e, s, c: (f'{e}.view({n})', (n,), c)

  def _mutation(self, rng, name, params):
    shape = self.shapes[name]
    src = next((f'x_{n}' for n in (name, name[:-len('_again')])
                if f'x_{n}' in params), None)
    kinds = ['mul', 'fill', 'add_scalar']
    if src:
      kinds += ['add', 'copy']
      if shape:
        kinds += ['index_copy', 'index_copy', 'setitem', 'index_put']
    kind = rng.choice(kinds)
    if kind == 'mul':
      return f'{name}.mul_({rng.choice((2.0, -0.5, 3.0))})'
    if kind == 'fill':
      return f'{name}.fill_({rng.choice((0.0, 1.5, -2.0))})'
    if kind == 'add_scalar':
      return f'{name}.add_({rng.choice((1.0, -3.0))})'
    if kind == 'add':
      return f'{name}.add_({src})'
    if kind == 'copy':
      return f'{name}.copy_({src} * -1)'
    dim = rng.randrange(len(shape)) if kind == 'index_copy' else 0
    k = rng.randint(1, shape[dim])
    index = sorted(rng.sample(range(shape[dim]), k))
    index_expr = f'torch.tensor({index}, device={name}.device)'
    if kind == 'setitem':
      start = rng.randrange(shape[-1])
      stop = rng.randint(start + 1, shape[-1])
      return f'{name}[..., {start}:{stop}] = {src}[..., {start}:{stop}] + 1'
    if kind == 'index_put':
      return f'{name}.index_put_(({index_expr},), {src}[:{k}] - 2)'
    rows = ', '.join(':' if d != dim else f':{k}' for d in range(len(shape)))
    return f'{name}.index_copy_({dim}, {index_expr}, {src}[{rows}] * 2)'

  def script(self, setup=None, body=None, eager=None, steps=None):
    setup = self.setup if setup is None else setup
    body = self.body if body is None else body
    eager = self.eager if eager is None else eager
    steps = self.steps if steps is None else steps
    names = [s.split(' = ')[0] for s in setup]
    lines = [f'# fuzz_views.py program, seed {self.seed}', HARNESS.strip(), '']
    lines += ['', 'def setup(device):']
    lines += [f'  {s}' for s in setup]
    lines += ['  return dict(' + ', '.join(f'{n}={n}' for n in names) + ')']
    lines += ['', '', f'def fn({", ".join(self.params)}):']
    lines += [f'  {s}' for s in body] or ['  pass']
    lines += ['', '', 'def eager(t):']
    lines += [f'  {s}' for s in eager] or ['  pass']
    lines += ['', '', f'ARGS = {self.args!r}', f'STEPS = {steps!r}']
    return '\n'.join(lines) + MAIN


def classify(exc_text):
  if 'MISMATCH' in exc_text:
    return 'mismatch'
  if 'NotImplementedError' in exc_text and 'openxla' in exc_text:
    return 'unsupported'
  return 'error'


def child(seeds):
  """Runs programs in this process, one JSON line per program."""
  import traceback
  import torch._dynamo
  for seed in seeds:
    print(f'START {seed}', flush=True)
    source = Program(seed).script()
    # Dynamo looks globals up by module name: make the program a module.
    module = types.ModuleType(f'fuzz_views_{seed}')
    sys.modules[module.__name__] = module
    torch._dynamo.reset()
    try:
      exec(compile(source, f'<seed {seed}>', 'exec'), module.__dict__)
      module.run()
      outcome, detail = 'ok', ''
    except Exception as e:
      text = ''.join(traceback.format_exception_only(type(e), e))
      outcome, detail = classify(text), text.strip().splitlines()[-1][:300]
    print('RESULT ' + json.dumps(dict(seed=seed, outcome=outcome,
                                      detail=detail)), flush=True)


def run_batches(seeds, batch, jobs, env):
  """Runs seeds in child processes; yields a result dict per seed."""
  pending = collections.deque(
      seeds[i:i + batch] for i in range(0, len(seeds), batch))
  running = []
  while pending or running:
    while pending and len(running) < jobs:
      chunk = pending.popleft()
      proc = subprocess.Popen(
          [sys.executable, __file__, '--child'] + [str(s) for s in chunk],
          stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
          env=env)
      running.append((proc, chunk))
    proc, chunk = running.pop(0)
    out, _ = proc.communicate()
    done = set()
    for line in out.splitlines():
      if line.startswith('RESULT '):
        result = json.loads(line[7:])
        done.add(result['seed'])
        yield result
    left = [s for s in chunk if s not in done]
    if left:  # the child died while running left[0]
      yield dict(seed=left[0], outcome='dead',
                 detail=f'child exited with status {proc.returncode}')
      if left[1:]:
        pending.appendleft(left[1:])


def run_script(source, env):
  proc = subprocess.run([sys.executable, '-c', source], capture_output=True,
                        text=True, env=env, timeout=600)
  if proc.returncode == 0:
    return 'ok'
  if proc.returncode < 0:
    return 'dead'
  return classify(proc.stderr)


def shrink(program, outcome, env, budget=40):
  """Drops statements while the script still fails the same way."""
  parts = dict(setup=list(program.setup), body=list(program.body),
               eager=list(program.eager), steps=list(program.steps))
  for _ in range(budget):
    progress = False
    for key in ('body', 'eager', 'steps', 'setup'):
      for i in range(len(parts[key])):
        trial = dict(parts)
        trial[key] = parts[key][:i] + parts[key][i + 1:]
        if key == 'steps' and 'compiled' not in trial['steps']:
          continue
        budget -= 1
        try:
          got = run_script(program.script(**trial), env)
        except subprocess.TimeoutExpired:
          got = 'timeout'
        if got == outcome:
          parts, progress = trial, True
          break
        if budget <= 0:
          return program.script(**parts)
      if progress:
        break
    if not progress:
      break
  return program.script(**parts)


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--seed', type=int, default=0, help='first seed')
  parser.add_argument('--count', type=int, default=100, help='programs')
  parser.add_argument('--long', action='store_true', help='1000 programs')
  parser.add_argument('--jobs', type=int, default=2, help='child processes')
  parser.add_argument('--batch', type=int, default=25,
                      help='programs per child process')
  parser.add_argument('--show', type=int, metavar='SEED',
                      help='print the script of one program and exit')
  parser.add_argument('--no-shrink', action='store_true',
                      help='print failing programs unshrunk')
  parser.add_argument('--max-reports', type=int, default=5,
                      help='reproducers to print per outcome')
  parser.add_argument('--json', help='write the results to this file')
  parser.add_argument('--child', nargs='+', type=int, help=argparse.SUPPRESS)
  args = parser.parse_args()
  if args.child:
    child(args.child)
    return 0
  if args.show is not None:
    print(Program(args.show).script())
    return 0

  count = 1000 if args.long else args.count
  env = dict(os.environ)
  env.setdefault('PJRT_DEVICE', 'CPU')
  seeds = list(range(args.seed, args.seed + count))
  results = []
  for result in run_batches(seeds, args.batch, args.jobs, env):
    results.append(result)
    if result['outcome'] != 'ok':
      print(f"seed {result['seed']}: {result['outcome']}: {result['detail']}",
            flush=True)
  results.sort(key=lambda r: r['seed'])
  counts = collections.Counter(r['outcome'] for r in results)
  reported = collections.Counter()
  for r in results:
    if r['outcome'] in ('ok', 'unsupported'):
      continue
    if reported[r['outcome']] >= args.max_reports:
      continue
    reported[r['outcome']] += 1
    program = Program(r['seed'])
    source = (program.script() if args.no_shrink else shrink(
        program, r['outcome'], env))
    print(f"\n===== reproducer: seed {r['seed']} ({r['outcome']}) =====")
    print(source)
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)
  summary = ', '.join(
      f'{counts[k]} {k}'
      for k in ('ok', 'mismatch', 'error', 'unsupported', 'dead'))
  print(f'\nfuzz_views: {len(results)} programs (seeds {seeds[0]}..'
        f'{seeds[-1]}): {summary}')
  return 0 if counts['mismatch'] + counts['error'] + counts['dead'] == 0 else 1


if __name__ == '__main__':
  sys.exit(main())
