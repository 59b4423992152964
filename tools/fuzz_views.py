#!/usr/bin/env python3
"""Differential fuzzer: torch.compile(backend="openxla") on views vs CPU eager.

Each program, made from a seed, takes one or two bases, random view chains on
them (select, narrow, unbind, transpose, flatten, view, t), passes some views
(and sometimes a base, or the same view twice) to a compiled function that
mutates them in place (add_, mul_, fill_, copy_, index_copy_, index_put_,
slice and tensor-key assignment), may mark them with
dynamo_set_buffer_donor_, returns nothing, a reduction, a view or several,
and runs for a few steps with eager mutations and reads in between.  After
every step every tensor (bases, views, clones, all outputs, as out{step}_{i})
is compared with the same program run eagerly on the CPU.  Families of programs, each chosen per
program by the seed (--families picks which may be chosen):
  rows    whole-row writes, which the bridge does in place: KV caches (4-D
          or 5-D paged caches, a (2, 1, H, S, D) static cache) whose K/V
          views are written by `flatten(0, 1).index_copy_(0, slots, k)`,
          `index_copy_(2, pos, k)`, `c[:, :, p:p+n] = k` or `copy_`, and
          those writes on other views too;
  static  bases or views marked with mark_static_address that fn reads as
          globals or as attributes of `model`, not as arguments, and a
          counter tensor that fn increments;
  meta    `unsqueeze_`/`squeeze_`/`t_`/`transpose_` on a view between
          compiled calls or (rarely) inside fn on a view argument; each
          undoes itself when run again;
  index   int32 or int64 index tensors (int64 for index_copy_, which CPU
          eager requires), built in fn or passed to it, tensor-key
          assignment, negative indices, and vLLM's pad slots: indices past
          the end, which XLA drops; CPU eager raises there, so the CPU run
          drops them itself (`in_range`);
  grad    fn computes a loss from a weight that requires grad and does its
          writes under torch.no_grad() (BatchNorm's running stats); the loss
          is backpropagated and w.grad compared too;
  outputs fn also returns views of intermediates (`out0 = v0.mul(2)`):
          `out0.view(-1), out0`, `*out0.unbind(0)`, `out0.t()`, an
          intermediate twice, views of inputs, sometimes under grad with
          intermediates of the loss's `y`; after each call one output is
          written in place (`outs[k].add_(1)`), which must show in the
          outputs and inputs it aliases, as in eager.

Every program is a standalone Python script: a failure is printed as that
script, shrunk to the fewest statements that still fail the same way.
Programs run in batches in child processes; a child that dies is counted
(`dead`) and the batch goes on in a new child.

Outcomes: ok, mismatch (silent wrong value), error (an exception that is not
the bridge's documented NotImplementedError), unsupported (that error), dead,
and invalid (CPU eager itself raised: a bug of this fuzzer, not of torch_xla).

Run it through the project's tool to pick the torch_xla:
  tools/apply_and_test.sh --run python tools/fuzz_views.py --count 50
  tools/apply_and_test.sh --unpatched --run python tools/fuzz_views.py \
      --count 50
  tools/apply_and_test.sh --run python tools/fuzz_views.py --long   # 1000
"""
import argparse
import collections
import json
import os
import random
import re
import select
import subprocess
import sys
import types

HARNESS = '''
import contextlib

import torch
import torch_xla

DONATE = torch.ops.xla.dynamo_set_buffer_donor_
PAD = 1_000_000_000  # vLLM's pad slot: out of range, XLA drops the write


class Model:
  """fn reads the STATIC tensors as attributes of `model` (or globals)."""


model = Model()


def values(*shape):
  return torch.arange(torch.Size(shape).numel(),
                      dtype=torch.float32).reshape(shape) / 7 - 1


def in_range(view, dim, index, src):
  """XLA drops writes at out-of-range indices; CPU eager raises: the CPU
  run drops them (and their rows of src) itself."""
  if view.device.type != 'cpu':
    return index, src
  keep = (index >= -view.shape[dim]) & (index < view.shape[dim])
  return index[keep], src[(slice(None),) * dim + (keep,)]


def compare(step, xla, cpu):
  for name, expected in cpu.items():
    if not isinstance(expected, torch.Tensor):
      continue
    got, expected = xla[name].detach().cpu(), expected.detach()
    if got.shape != expected.shape or not torch.allclose(
        got, expected, rtol=1e-5, atol=1e-5):
      diff = ((got - expected).abs().max().item()
              if got.shape == expected.shape else 'shape')
      raise AssertionError(
          f'MISMATCH after {step}: {name} differs from CPU eager ({diff})')


def call(f, state, step):
  for name in STATIC:
    globals()[name] = state[name]
    setattr(model, name, state[name])
  with torch.enable_grad() if GRAD else contextlib.nullcontext():
    out = f(*[state[n] for n in ARGS])
  outs = out if isinstance(out, tuple) else () if out is None else (out,)
  if GRAD:
    outs[0].backward()
    state['w_grad'] = state['w'].grad
  with torch.no_grad():
    after(outs)
  for i, out in enumerate(outs):
    state[f'out{step}_{i}'] = out


def reference(f, *args):
  try:
    return f(*args)
  except Exception as e:
    raise AssertionError(f'INVALID program: CPU eager raised {e!r}') from e


def run():
  xla, cpu = setup(torch_xla.device()), setup('cpu')
  compiled = torch.compile(fn, backend='openxla')
  for step, kind in enumerate(STEPS):
    if kind == 'compiled':
      reference(call, fn, cpu, step)
      call(compiled, xla, step)
    else:
      reference(eager, cpu)
      eager(xla)
    compare(f'step {step} ({kind})', xla, cpu)
'''

MAIN = '''

if __name__ == '__main__':
  run()
  print('ok')
'''

# The families of programs that --families can leave out (see the docstring).
FAMILIES = ('rows', 'static', 'meta', 'index', 'grad', 'outputs')

# Whole-row writes into KV caches: (kind, base shape, the row dim of a view).
CACHES = (
    ('paged 5-D', lambda r: (2, r(2, 4), r(2, 4), r(1, 3), r(2, 4)), 0),
    ('paged 4-D', lambda r: (2, r(2, 4), r(2, 4), r(2, 4)), 0),
    ('static', lambda r: (2, 1, r(1, 3), r(3, 6), r(2, 4)), 2),
)


def broadcasts(src, dst):
  """Whether a tensor of shape `src` can be written into one of shape `dst`."""
  return len(src) <= len(dst) and all(
      s in (1, d) for s, d in zip(reversed(src), reversed(dst)))


class Program:
  """A random program, as the statements of a script."""

  def __init__(self, seed, families=FAMILIES):
    self.seed, self.families = seed, families
    rng = random.Random(seed)
    self.setup = []  # statements of setup(device); names in self.shapes
    self.shapes = {}
    self.contiguous = {}  # view name -> whether flatten(0, 1) is a view
    self.body = []  # statements of fn(*ARGS)
    self.eager = []  # statements of eager(t)
    self.exprs = {}  # view name -> its expression on a base
    self.static = []  # names fn reads as globals or attributes of `model`
    self.other_shape = {}  # view -> its shape after its metadata mutation
    self.grad = self._chance(rng, 'grad', 0.15)
    static = self._chance(rng, 'static', 0.25)
    cache = rng.choice(CACHES) if self._chance(rng, 'rows', 0.3) else None
    self.row_dim = cache[2] if cache else None
    bases = self._cache(rng, cache) if cache else self._bases(rng)
    views = list(self.exprs)
    inside = rng.random() < 0.3
    toggle, toggle_in_fn = None, False
    if self._chance(rng, 'meta', 0.25):  # a metadata mutation of `toggled`
      toggled = rng.choice(views)
      toggle, other = self._toggle(rng, self.shapes[toggled])
      toggle_in_fn = not inside and rng.random() < 0.2
      if not inside and other != self.shapes[toggled]:
        self.other_shape[toggled] = other  # fn sees both shapes
    if inside:
      self._views_inside(rng, bases, views, static)
    else:
      self._views_passed(rng, bases, views, static)
    self.steps = ['compiled'] * rng.randint(1, 3)
    if toggle_in_fn and toggled in self.params:  # each call undoes the last
      returns = bool(self.body) and self.body[-1].startswith('return ')
      self.body.insert(rng.randint(0,
                                   len(self.body) - returns),
                       toggle.format(toggled))
      self.steps = ['compiled'] * rng.randint(2, 3)
      toggle = None
    if self.grad:
      self._grad(rng)
    for name in self.static:  # globals, or attributes of `model`
      if rng.random() < 0.5:
        self.body = [
            re.sub(rf'(?<![\w.]){name}\b(?!_)', f'model.{name}', s)
            for s in self.body
        ]
    if toggle:
      self.eager.append(toggle.format(f"t['{toggled}']"))
      self.steps = ['compiled', 'eager', 'compiled'
                   ] + (['eager', 'compiled'] if rng.random() < 0.5 else [])
    if rng.random() < 0.6:  # an eager write or read
      if 'eager' not in self.steps:
        self.steps.insert(rng.randint(1, len(self.steps)), 'eager')
      name = rng.choice(bases + views)
      self.eager.insert(
          rng.randint(0, len(self.eager)),
          rng.choice([
              f"t['{name}'].add_(1)", f"t['{name}'].mul_(-1)",
              f"t['read'] = t['{name}'] * 2"
          ]))
      self.setup.append('read = None')
    self.after = []  # statements of after(outs), run after each call
    if self._chance(rng, 'outputs', 0.4):  # last: other seeds keep their draws
      self._outputs(rng)

  def _chance(self, rng, family, p):
    """True with probability `p` if `family` is on."""
    return rng.random() < p and family in self.families

  def _bases(self, rng):
    """One or two bases with 1 to 3 random view chains on them."""
    bases = []
    for b in range(rng.choice((1, 1, 2))):
      shape = tuple(rng.randint(2, 5) for _ in range(rng.randint(2, 4)))
      name = f'base{b}'
      self.setup.append(f'{name} = values{shape}.to(device)')
      self.shapes[name] = shape
      bases.append(name)
    for v in range(rng.randint(1, 3)):
      base = rng.choice(bases)
      expr, shape, contiguous = base, self.shapes[base], True
      for _ in range(rng.randint(1, 3)):
        op = self._view_op(rng, shape, contiguous)
        if op is None:
          break
        expr, shape, contiguous = op(expr, shape, contiguous)
      if expr != base:
        self._add_view(f'v{v}', expr, shape, contiguous)
    if not self.exprs:
      self._add_view('v0', f'{bases[0]}[0]', self.shapes[bases[0]][1:], True)
    return bases

  def _cache(self, rng, cache):
    """A KV cache and its K and/or V views, as vLLM and HF's StaticCache."""
    shape = cache[1](rng.randint)
    self.setup.append(f'base0 = values{shape}.to(device)')
    self.shapes['base0'] = shape
    picks = rng.choice(([0, 1], [0, 1], [0], [1]))
    how = rng.choice(
        ('base0[{}]', 'base0.unbind(0)[{}]', 'base0.select(0, {})'))
    for v in picks:
      self._add_view(f'v{v}', how.format(v), shape[1:], True)
    return ['base0']

  def _add_view(self, name, expr, shape, contiguous):
    self.setup.append(f'{name} = {expr}')
    self.exprs[name], self.shapes[name] = expr, shape
    self.contiguous[name] = contiguous

  def _make_static(self, rng, names):
    """Marks some of `names` static; fn then reads them as globals."""
    chosen = [n for n in names if rng.random() < 0.5] or [rng.choice(names)]
    self.setup.append('count = torch.zeros((), dtype=torch.int64, '
                      'device=device)')
    self.shapes['count'] = ()
    for name in chosen + ['count']:
      self.setup.append(f'torch._dynamo.mark_static_address({name})')
    self.static = chosen + ['count']
    return chosen

  def _views_inside(self, rng, bases, views, static):
    """The bases are passed; fn takes the views of them itself."""
    used = sorted({self.exprs[v].split('.')[0].split('[')[0] for v in views})
    params = list(used)
    if static:  # read as globals: not passed
      chosen = self._make_static(rng, used)
      params = [p for p in params if p not in chosen]
    for name in views:
      self.setup.append(f'x_{name} = values{self.shapes[name]}.to(device)')
      self.shapes[f'x_{name}'] = self.shapes[name]
      params.append(f'x_{name}')
    self.args, self.params, self.targets = list(params), params, used
    for name in used:
      if rng.random() < 0.6:
        self.body.append(f'DONATE({name}, True)')
    for _ in range(rng.randint(1, 4)):
      name = rng.choice(views)
      statement = self._mutation(rng, name)
      self.body.append(
          re.sub(rf'\b{name}\b(?!_)', f'({self.exprs[name]})', statement))
    if self.static:
      self.body.insert(rng.randint(0, len(self.body)), 'count.add_(1)')
    if rng.random() < 0.3:
      self.body.append('return ' + ' + '.join(f'{b}.sum()' for b in used))

  def _views_passed(self, rng, bases, views, static):
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
    targets = [p for p in params if not p.startswith('x_')]
    if static:  # read as globals: not passed (their `_again` still is)
      for name in self._make_static(rng, [t for t in targets if t in args]):
        i = params.index(name)
        del args[i], params[i]
    self.args, self.params, self.targets = args, params, targets
    if rng.random() < 0.3:
      name = rng.choice(views)
      self.setup.append(f'{name}_clone = {name}.clone()')
    for name in targets:
      if rng.random() < 0.3:
        self.body.append(f'DONATE({name}, True)')
    for _ in range(rng.randint(1, 4)):
      name = rng.choice(targets)
      self.body.append(self._mutation(rng, name))
    if self.static:
      self.body.insert(rng.randint(0, len(self.body)), 'count.add_(1)')
    ret = rng.random()
    if ret < 0.3:
      self.body.append('return ' + ' + '.join(f'{a}.sum()' for a in targets))
    elif ret < 0.5:
      name = rng.choice(targets)
      self.body.append(
          f'return {name}[0]' if self.shapes[name] else f'return {name}')

  def _grad(self, rng):
    """A loss from a weight that requires grad; the writes under no_grad."""
    r, n, m = (rng.randint(2, 4) for _ in range(3))
    self.shapes.update(w=(n, m), x_w=(r, n), y=(r, m))
    self.setup += [
        f'w = values({n}, {m}).to(device).requires_grad_()',
        f'x_w = values({r}, {n}).to(device)'
    ]
    self.args += ['w', 'x_w']
    self.params += ['w', 'x_w']
    read = rng.choice(self.targets + [''])
    body = [s for s in self.body if not s.startswith('return ')]
    self.body = ['y = x_w @ w' + (f' + {read}.mean()' if read else '')]
    self.body += [
        s if s.startswith('DONATE') else f'with torch.no_grad(): {s}'
        for s in body
    ]
    if rng.random() < 0.5:  # running stats
      name = rng.choice(self.targets)
      self.body.append(f'with torch.no_grad(): {name}.mul_(0.9).add_('
                       f'y.mean() * 0.1)')
    self.body.append('return (y * y).mean()')

  def _outputs(self, rng):
    """fn also returns views of intermediates and of inputs; after(outs)
    writes one of the outputs in place."""
    if not self.grad and rng.random() < 0.3:
      self.grad = True
      self._grad(rng)
    returns = bool(self.body) and self.body[-1].startswith('return ')
    outs = [self.body.pop()[len('return '):]] if returns else []
    count = len(outs)
    sources = [
        p for p in self.params if not p.startswith('index') and
        self.shapes.get(p) and p.replace('_again', '') not in self.other_shape
    ] + (['y'] * 2 if self.grad else [])
    if not sources:
      return
    views = []  # (expression, how many outputs it gives)
    for j in range(rng.randint(1, 2)):
      src = rng.choice(sources)
      shape = self.shapes[src]
      out = f'out{j}'
      self.body.insert(
          rng.randint(int(self.grad and src == 'y'), len(self.body)),
          f'{out} = ' + rng.choice(
              ('{}.mul(2)', '{} + 1', '{}.clone()')).format(src))
      if src not in ('w',
                     'y') and rng.random() < 0.3 and (f'DONATE({src}, True)'
                                                      not in self.body):
        self.body.insert(0, f'DONATE({src}, True)')
      kinds = ['itself', 'first', 'unbind', 'split', 't', 'unsqueeze']
      if re.match(r'(base\d|x_\w+|w|y)$', src.replace('_again', '')):
        kinds += ['view', 'view']  # contiguous: view(-1) is a view
      for _ in range(rng.randint(1, 3)):
        kind = rng.choice(kinds)
        views.append({
            'itself': (out, 1),
            'first': (f'{out}[0]', 1),
            'unbind': (f'*{out}.unbind(0)', shape[0]),
            'split': (f'*{out}.split(1)', shape[0]),
            't':
                (f'{out}.t()' if len(shape) <= 2 else f'{out}.transpose(0, -1)',
                 1),
            'unsqueeze': (f'{out}.unsqueeze(0)', 1),
            'view': (f'{out}.view(-1)', 1),
        }[kind])
    if rng.random() < 0.4:  # a view of an input (or the input) too
      src = rng.choice([s for s in sources if s != 'y'] or sources)
      views.append((rng.choice((src, f'{src}[0]', f'{src}.unsqueeze(0)')), 1))
    rng.shuffle(views)
    outs += [expr for expr, _ in views]
    count += sum(n for _, n in views)
    self.body.append('return ' + ', '.join(outs) +
                     (',' if len(outs) == 1 else ''))
    self.after.append(f'outs[{rng.randrange(count)}].' +
                      rng.choice(('add_(1)', 'mul_(-2)', 'fill_(0.5)')))
    # fn writes what it donates, as upstream's donation asks: XLA may give
    # the buffer of a donated input that fn does not write to an output of
    # its shape, and the input is then deleted.
    for i in reversed(range(len(self.body))):
      donated = re.match(r'DONATE\((\w+), True\)$', self.body[i])
      if donated:
        self.body.insert(i + 1, f'{donated.group(1)}.add_(0.0)')

  @staticmethod
  def _toggle(rng, shape):
    """A metadata mutation that undoes itself when run again: the statement
    (with {} for the view) and the view's other shape."""
    n = len(shape)
    kinds = ['unsqueeze'] + (['squeeze'] if 1 in shape else []) + (
        ['transpose'] if n >= 2 else []) + (['t'] if n == 2 else [])
    kind = rng.choice(kinds)
    if kind == 'unsqueeze':
      d = rng.randint(0, n)
      return (f'{{0}}.unsqueeze_({d}) if {{0}}.dim() == {n} else '
              f'{{0}}.squeeze_({d})', shape[:d] + (1,) + shape[d:])
    if kind == 'squeeze':
      d = rng.choice([i for i, s in enumerate(shape) if s == 1])
      return (f'{{0}}.squeeze_({d}) if {{0}}.dim() == {n} else '
              f'{{0}}.unsqueeze_({d})', shape[:d] + shape[d + 1:])
    if kind == 't':
      return '{0}.t_()', shape[::-1]
    d0, d1 = rng.sample(range(n), 2)
    other = list(shape)
    other[d0], other[d1] = other[d1], other[d0]
    return f'{{0}}.transpose_({d0}, {d1})', tuple(other)

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
      return lambda e, s, c: (expr.format(e, dim, index), new_shape, c and keeps
                             )
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

  def _mutation(self, rng, name):
    """A statement of fn that writes into the tensor `name`."""
    shape = self.shapes[name]
    root = name[:-len('_again')] if name.endswith('_again') else name
    src = f'x_{root}' if f'x_{root}' in self.params else None
    kinds = ['mul', 'fill', 'add_scalar']
    if root in self.other_shape:  # fn sees two shapes: writes that fit both
      if src and broadcasts(shape, self.other_shape[root]):
        kinds += ['add', 'copy']
    elif src:
      kinds += ['add', 'copy']
      if shape:
        kinds += ['index_copy', 'index_copy', 'setitem', 'index_put']
        if 'index' in self.families:
          kinds += ['setitem_index']
        if 'rows' in self.families:
          kinds += ['slice_rows', 'slice_copy']
          if len(shape) >= 2 and self.contiguous.get(root):
            kinds += ['slots']
        if self.row_dim is not None:  # a KV cache: mostly whole-row writes
          kinds += (['slots'] * 3 if self.row_dim == 0 else
                    ['index_copy', 'slice_rows', 'slice_copy'] * 2)
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
    if kind == 'setitem':
      start = rng.randrange(shape[-1])
      stop = rng.randint(start + 1, shape[-1])
      return f'{name}[..., {start}:{stop}] = {src}[..., {start}:{stop}] + 1'
    if kind == 'slots':  # vLLM: key_cache.flatten(0, 1).index_copy_(0, ...)
      flat = f'{name}.flatten(0, 1)'
      index = self._index(rng, name, shape[0] * shape[1], True)
      return self._indexed(f'{flat}.index_copy_(0, {{}}, {{}})', flat, 0, index,
                           f'{src}.flatten(0, 1)[:{{}}] * 2')
    dim = (self.row_dim if self.row_dim is not None and rng.random() < 0.7 and
           self.row_dim < len(shape) else rng.randrange(len(shape)))
    if kind.startswith('slice'):  # c[:, :, p:p+n] = k, or its copy_
      start = rng.randrange(shape[dim])
      n = rng.randint(1, shape[dim] - start)
      pre = ':, ' * dim
      target = f'{name}[{pre}{start}:{start + n}]'
      if kind == 'slice_copy':
        return f'{target}.copy_({src}[{pre}:{n}] * 3)'
      return f'{target} = {src}[{pre}:{n}] + 1'
    if kind != 'index_copy':
      dim = 0
    index = self._index(rng, name, shape[dim], kind == 'index_copy')
    if kind == 'index_put':
      return self._indexed(f'{name}.index_put_(({{}},), {{}})', name, 0, index,
                           f'{src}[:{{}}] - 2')
    if kind == 'setitem_index':
      return self._indexed(f'{name}[{{}}] = {{}}', name, 0, index,
                           f'{src}[:{{}}] + 3')
    rows = ', '.join(':' if d != dim else ':{}' for d in range(len(shape)))
    return self._indexed(f'{name}.index_copy_({dim}, {{}}, {{}})', name, dim,
                         index, f'{src}[{rows}] * 2')

  def _index(self, rng, name, size, int64):
    """An index of distinct rows of `size`, maybe ending with pad slots
    (out of range), int32 or int64 (int64 where `int64`: index_copy_), built
    in fn or passed to it: (its expression, its length, whether padded)."""
    n = rng.randint(1, size)
    index = rng.sample(range(size), n)
    if rng.random() < 0.5:
      index.sort()
    if not int64 and self._chance(rng, 'index', 0.2):  # counts from the end
      index[0] -= size
    padded = self._chance(rng, 'index', 0.3)
    if padded:  # pad slots: past the end of the view
      pads = rng.randint(1, min(2, n))
      index[n - pads:] = [rng.choice(('PAD', size, size + 1))] * pads
    dtype = 'torch.int64' if int64 or not self._chance(rng, 'index', 0.5) else (
        'torch.int32')
    values = '[' + ', '.join(str(i) for i in index) + ']'
    if self._chance(rng, 'index', 0.5):  # an argument, as vLLM's slot_mapping
      arg = f'index{sum(a.startswith("index") for a in self.args)}'
      self.setup.append(
          f'{arg} = torch.tensor({values}, dtype={dtype}, device=device)')
      self.shapes[arg] = (n,)
      self.args.append(arg)
      self.params.append(arg)
      return arg, n, padded
    return (f'torch.tensor({values}, dtype={dtype}, device={name}.device)', n,
            padded)

  @staticmethod
  def _indexed(write, view, dim, index, src):
    """`write` formatted with the index and src; with pad slots in the index,
    the CPU run drops them first (XLA drops them, CPU eager raises)."""
    index, n, padded = index
    src = src.format(n)
    if not padded:
      return write.format(index, src)
    return (f'i, s = in_range({view}, {dim}, {index}, {src}); ' +
            write.format('i', 's'))

  def script(self, setup=None, body=None, eager=None, steps=None, after=None):
    setup = self.setup if setup is None else setup
    after = self.after if after is None else after
    body = self.body if body is None else body
    eager = self.eager if eager is None else eager
    steps = self.steps if steps is None else steps
    names = [s.split(' = ')[0] for s in setup if ' = ' in s]
    lines = [
        f'# fuzz_views.py program, seed {self.seed}' +
        ('' if self.families == FAMILIES else
         f' (--families "{",".join(self.families)}")'),
        HARNESS.strip(), ''
    ]
    lines += ['', 'def setup(device):']
    lines += [f'  {s}' for s in setup]
    lines += ['  return dict(' + ', '.join(f'{n}={n}' for n in names) + ')']
    lines += ['', '', f'def fn({", ".join(self.params)}):']
    lines += [f'  {s}' for s in body] or ['  pass']
    lines += ['', '', 'def eager(t):']
    lines += [f'  {s}' for s in eager] or ['  pass']
    lines += ['', '', 'def after(outs):']
    lines += [f'  {s}' for s in after] or ['  pass']
    lines += [
        '', '', f'ARGS = {self.args!r}', f'STATIC = {self.static!r}',
        f'GRAD = {self.grad!r}', f'STEPS = {steps!r}'
    ]
    return '\n'.join(lines) + MAIN


def failure(text):
  """The line of an exception's text or traceback that names the failure:
  the last one that starts with an exception's name; for an exception with
  no message, with the file and function that raised it."""
  lines = text.splitlines()
  named = [
      i for i, l in enumerate(lines)
      if re.match(r'([\w.]+\.)?\w*(Error|Exception|Failed)\b', l)
  ]
  if not named:
    return (text.strip().splitlines() or [''])[-1].strip()
  line = lines[named[-1]].strip()
  if not line.partition(':')[2].strip():  # where did it come from?
    first = next(i for i in named if lines[i].strip() == line)
    frames = [
        m for m in (re.search(r'File "([^"]*)", line \d+, in (\S+)', l)
                    for l in lines[:first]) if m
    ]
    if frames:
      line += f' (in {os.path.basename(frames[-1][1])}:{frames[-1][2]})'
  return line


def classify(line):
  """The outcome of a program that raised; `line` as given by failure()."""
  if line.startswith('AssertionError: MISMATCH'):
    return 'mismatch'
  if line.startswith('AssertionError: INVALID'):
    return 'invalid'
  if line.startswith('NotImplementedError: torch.compile(backend="openxla")'):
    return 'unsupported'
  return 'error'


def same_failure(outcome, line):
  """What a shrunk program must keep: the outcome, and for an error the
  exception and the start of its message (numbers aside)."""
  if outcome not in ('error', 'unsupported'):
    return outcome
  return outcome + ': ' + re.sub(r'\d+', 'N', line)[:70]


def run_source(source, name):
  """Runs a program's script in this process: (outcome, detail)."""
  import traceback
  import torch._dynamo
  # Dynamo looks globals up by module name: make the program a module.
  module = types.ModuleType(name)
  sys.modules[name] = module
  torch._dynamo.reset()
  try:
    exec(compile(source, f'<{name}>', 'exec'), module.__dict__)
    module.run()
    return 'ok', ''
  except Exception as e:
    detail = failure(''.join(
        traceback.format_exception(type(e), e, e.__traceback__)))
    return classify(detail), detail[:300]


def child(seeds, families):
  """Runs programs in this process, one JSON line per program."""
  for seed in seeds:
    print(f'START {seed}', flush=True)
    outcome, detail = run_source(
        Program(seed, families).script(), f'fuzz_views_{seed}')
    print('RESULT ' +
          json.dumps(dict(seed=seed, outcome=outcome, detail=detail)),
          flush=True)


def worker():
  """Runs the scripts sent on stdin (JSON lines), a JSON line for each."""
  for n, line in enumerate(sys.stdin):
    result = run_source(json.loads(line), f'fuzz_views_trial{n}')
    print('RESULT ' + json.dumps(result), flush=True)


def run_batches(seeds, families, batch, jobs, env):
  """Runs seeds in child processes; yields a result dict per seed."""
  pending = collections.deque(
      seeds[i:i + batch] for i in range(0, len(seeds), batch))
  running = []
  while pending or running:
    while pending and len(running) < jobs:
      chunk = pending.popleft()
      proc = subprocess.Popen([
          sys.executable, __file__, '--families', ','.join(families), '--child'
      ] + [str(s) for s in chunk],
                              stdout=subprocess.PIPE,
                              stderr=subprocess.DEVNULL,
                              text=True,
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
      yield dict(seed=left[0],
                 outcome='dead',
                 detail=f'child exited with status {proc.returncode}')
      if left[1:]:
        pending.appendleft(left[1:])


def run_script(source, env):
  """same_failure() of a run of `source` alone, in a new process."""
  try:
    proc = subprocess.run([sys.executable, '-c', source],
                          capture_output=True,
                          text=True,
                          env=env,
                          timeout=600)
  except subprocess.TimeoutExpired:
    return 'timeout'
  if proc.returncode == 0:
    return 'ok'
  if proc.returncode < 0:
    return 'dead'
  line = failure(proc.stderr)
  return same_failure(classify(line), line)


class Worker:
  """Runs scripts in a child process that imports torch_xla once (a new
  child after one dies): same_failure() of each run."""

  def __init__(self, env):
    self.env, self.proc = env, None

  def __call__(self, source, timeout=600):
    if self.proc is None:
      self.proc = subprocess.Popen([sys.executable, __file__, '--worker'],
                                   stdin=subprocess.PIPE,
                                   stdout=subprocess.PIPE,
                                   stderr=subprocess.DEVNULL,
                                   bufsize=0,
                                   env=self.env)
    self.proc.stdin.write(json.dumps(source).encode() + b'\n')
    while select.select([self.proc.stdout], [], [], timeout)[0]:
      line = self.proc.stdout.readline().decode()
      if not line:
        break
      if line.startswith('RESULT '):
        return same_failure(*json.loads(line[7:]))
    died = self.proc.poll() is not None
    self.close()
    return 'dead' if died else 'timeout'

  def close(self):
    if self.proc is not None:
      self.proc.kill()
      self.proc.wait()
      self.proc = None


def shrink(program, target, run, budget=60):
  """Drops statements while the script still fails the same way (`target`,
  from same_failure()) when given to `run`."""
  parts = dict(setup=list(program.setup),
               body=list(program.body),
               eager=list(program.eager),
               steps=list(program.steps),
               after=list(program.after))
  progress = True
  while progress and budget > 0:
    progress = False
    for key in ('body', 'eager', 'after', 'steps', 'setup'):
      i = 0
      while i < len(parts[key]) and budget > 0:
        trial = dict(parts, **{key: parts[key][:i] + parts[key][i + 1:]})
        if key == 'steps' and 'compiled' not in trial['steps']:
          i += 1
          continue
        budget -= 1
        if run(program.script(**trial)) == target:
          parts, progress = trial, True
        else:
          i += 1
  return program.script(**parts)


def main():
  parser = argparse.ArgumentParser(
      description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
  parser.add_argument('--seed', type=int, default=0, help='first seed')
  parser.add_argument('--count', type=int, default=100, help='programs')
  parser.add_argument('--long', action='store_true', help='1000 programs')
  parser.add_argument('--jobs', type=int, default=2, help='child processes')
  parser.add_argument('--batch',
                      type=int,
                      default=25,
                      help='programs per child process')
  parser.add_argument('--show',
                      type=int,
                      metavar='SEED',
                      help='print the script of one program and exit')
  parser.add_argument('--no-shrink',
                      action='store_true',
                      help='print failing programs unshrunk')
  parser.add_argument('--max-reports',
                      type=int,
                      default=5,
                      help='reproducers to print per outcome')
  parser.add_argument('--unsupported',
                      action='store_true',
                      help='print reproducers of unsupported programs too')
  parser.add_argument('--families',
                      default=','.join(FAMILIES),
                      help='the families that programs may have, of '
                      f'{",".join(FAMILIES)} (default: all; "" for none)')
  parser.add_argument('--json', help='write the results to this file')
  parser.add_argument('--save',
                      metavar='DIR',
                      help='write each reproducer to DIR/fuzz_fail_SEED.py')
  parser.add_argument('--child', nargs='+', type=int, help=argparse.SUPPRESS)
  parser.add_argument('--worker', action='store_true', help=argparse.SUPPRESS)
  args = parser.parse_args()
  families = tuple(f for f in args.families.split(',') if f)
  if set(families) - set(FAMILIES):
    parser.error(f'--families: unknown {set(families) - set(FAMILIES)}')
  if args.child:
    child(args.child, families)
    return 0
  if args.worker:
    worker()
    return 0
  if args.show is not None:
    print(Program(args.show, families).script())
    return 0

  count = 1000 if args.long else args.count
  env = dict(os.environ)
  env.setdefault('PJRT_DEVICE', 'CPU')
  seeds = list(range(args.seed, args.seed + count))
  results = []
  for result in run_batches(seeds, families, args.batch, args.jobs, env):
    results.append(result)
    if result['outcome'] != 'ok':
      print(f"seed {result['seed']}: {result['outcome']}: {result['detail']}",
            flush=True)
  results.sort(key=lambda r: r['seed'])
  counts = collections.Counter(r['outcome'] for r in results)
  reported = collections.Counter()
  run = Worker(env)
  for r in results:
    if r['outcome'] == 'ok' or (r['outcome'] == 'unsupported' and
                                not args.unsupported):
      continue
    if reported[r['outcome']] >= args.max_reports:
      continue
    reported[r['outcome']] += 1
    program = Program(r['seed'], families)
    source, note = program.script(), ''
    if not args.no_shrink:
      target = same_failure(r['outcome'], r['detail'])
      source = shrink(program, target, run)
      alone = run_script(source, env)  # shrunk in a process that ran others
      if alone != target:
        note = f' (but run alone: {alone})'
    print(f"\n===== reproducer: seed {r['seed']} ({r['outcome']}){note} =====")
    print(source)
    if args.save:
      with open(os.path.join(args.save, f"fuzz_fail_{r['seed']}.py"), 'w') as f:
        f.write(source)
  run.close()
  if args.json:
    with open(args.json, 'w') as f:
      json.dump(results, f, indent=1)
  kinds = ['ok', 'mismatch', 'error', 'unsupported', 'dead']
  summary = ', '.join(f'{counts[k]} {k}' for k in kinds +
                      (['invalid'] if counts['invalid'] else []))
  print(f'\nfuzz_views: {len(results)} programs (seeds {seeds[0]}..'
        f'{seeds[-1]}): {summary}')
  failed = sum(counts[k] for k in ('mismatch', 'error', 'dead', 'invalid'))
  return 0 if failed == 0 else 1


if __name__ == '__main__':
  sys.exit(main())
