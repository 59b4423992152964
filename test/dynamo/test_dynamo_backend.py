"""backend='openxla' compiles with torch_xla._dynamo.backend's compiler, which
torch asks for (its hook) or torch_xla puts in torch's registry."""
import sys
import unittest
from unittest import mock

import torch
import torch._dynamo
from torch._dynamo.backends import registry, torchxla
import torch_xla
from torch_xla._dynamo import backend


class OpenXLABackendTest(unittest.TestCase):

  def setUp(self):
    super().setUp()
    torch._dynamo.reset()

  def test_backend_comes_from_torchs_hook_or_the_registry(self):
    compiler = registry.lookup_backend('openxla')
    if hasattr(torchxla, 'openxla_aot'):
      # torch asks torch_xla._dynamo.backend for the compiler at compile time.
      self.assertIs(compiler, torchxla.openxla)
    else:  # torch_xla replaced the registry's entry
      self.assertIsNot(compiler, torchxla.openxla)
    self.assertEqual(compiler._tags, torchxla.openxla._tags)

  def test_every_graph_is_compiled_by_the_compiler(self):
    graphs, openxla_backend = [], backend.openxla_backend

    def counting_backend(aot_backend):
      compiler = openxla_backend(aot_backend)

      def counting(module, example_inputs):
        graphs.append(module)
        return compiler(module, example_inputs)

      counting._tags = compiler._tags
      return counting

    self.addCleanup(registry._COMPILER_FNS.update, dict(registry._COMPILER_FNS))
    with mock.patch.object(backend, 'openxla_backend', counting_backend):
      backend.install()  # the registry's entry, on a torch without the hook

      def fn(a, b):
        a.add_(b)
        return a * 2

      device = torch_xla.device()
      a, b = torch.arange(6.).reshape(2, 3), torch.ones(2, 3)
      xla_a = a.to(device)
      out = torch.compile(fn, backend='openxla')(xla_a, b.to(device))
      expected = fn(a, b)
    self.assertEqual(len(graphs), 1)
    torch.testing.assert_close(out.cpu(), expected)
    torch.testing.assert_close(xla_a.cpu(), a)

  def test_mode_and_options_are_accepted(self):
    # AOTAutograd's backend ignores torch.compile's mode= and options=
    # (transformers' CompileConfig passes mode="reduce-overhead").
    device = torch_xla.device()
    a, b = torch.arange(6.).reshape(2, 3), torch.ones(2, 3)
    xla_a = a.to(device)

    def fn(a, b):
      a.add_(b)
      return a * 2

    for kwargs in (dict(mode='reduce-overhead'), dict(mode='max-autotune'),
                   dict(options={'trace.enabled': False})):
      torch._dynamo.reset()
      out = torch.compile(fn, backend='openxla', **kwargs)(xla_a, b.to(device))
      torch.testing.assert_close(out.cpu(), fn(a, b))
      torch.testing.assert_close(xla_a.cpu(), a)


if __name__ == '__main__':
  test = unittest.main()
  sys.exit(0 if test.result.wasSuccessful() else 1)
