"""The learner pieces of a whole config, as a policy bundle builds them (``policy.make_policy``),
for tests that exercise the learner alone."""

from jaxdqn import learner


def optimizer_of(config):
    return learner.make_optimizer(config.optimizer, lr=config.lr, adam_epsilon=config.adam_epsilon,
                                  grad_clip=config.grad_clip, grad_clip_mode=config.grad_clip_mode)


def train_step_of(config, network, optimizer, axis_name=None):
    return learner.make_train_step(config.loss, network, optimizer, lr=config.lr, lr_schedule=config.lr_schedule,
                                   gamma=config.gamma, axis_name=axis_name)


def sequence_loss_of(config, network, **kwargs):
    return learner.make_sequence_loss(config.loss, network, gamma=config.gamma, **kwargs)
