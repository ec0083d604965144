"""Bad input to every public entry point of ``jaxlab.federated.fedgwc`` gets a clear error.

One table of ``(entry point, bad argument, call, exception type, message fragment)``: wrong types,
ranks, shapes and dtypes, out-of-range values, NaN / inf data, empty data, states built for
another size and wrong PRNG keys. Every error is raised at the boundary, before anything is
compiled; the tests at the end check that a diverged (non-finite) round is flagged, not reported.
"""

from __future__ import annotations

import functools

import jax
import jax.numpy as jnp
import numpy as np
import pytest

from jaxlab.core.nn import MLP
from jaxlab.federated import fedgwc as F

K, N, D = 4, 4, 3  # clients, rows per client, features; 3 classes
NET = MLP((4, 3))
LOCAL = F.LocalConfig(steps=1, batch_size=2, lr=0.1)
CFG = F.FedGWCConfig(participation=0.5, local=LOCAL, max_clusters=2, max_candidates=3)
CFG3 = F.FedGWCConfig(participation=0.5, local=LOCAL, max_clusters=3, max_candidates=3)
CFL = F.CFLConfig(eps1=1.0, eps2=1.0)
KEY = jax.random.key(0)


@functools.cache
def v():
    """The valid inputs, built once (tiny: nothing here compiles a training program)."""
    rng = np.random.default_rng(0)
    data = F.ClientData(
        x=jnp.asarray(rng.standard_normal((K, N, D)), jnp.float32),
        y=jnp.asarray(rng.integers(0, 3, (K, N)), jnp.int32),
        count=jnp.full((K,), N, jnp.int32),
        noise=jnp.zeros((K,), jnp.float32),
    )
    params = NET.init(jax.random.key(1), jnp.zeros((1, D)))
    fed = F.make_fedgwc(CFG, NET.apply, data)
    state = fed.init(KEY, params)
    other_k = F.init(params, K + 1, CFG, key=KEY)  # built for 5 clients
    other_c = F.init(params, K, CFG3, key=KEY)  # built for 3 cluster slots
    ifca = F.make_ifca(CFG, NET.apply, data)
    inits = F.random_inits(lambda k: NET.init(k, jnp.zeros((1, D))), KEY, 2)
    istate = ifca.init(KEY, inits)
    stacked = jax.tree_util.tree_map(lambda a: jnp.stack([a] * K), params)
    return dict(data=data, params=params, fed=fed, state=state, other_k=other_k,
                other_c=other_c, ifca=ifca, istate=istate, inits=inits,
                stacked=stacked)  # fmt: skip


def data_with(**fields):
    return v()["data"].replace(**fields)


def x_nan():
    return v()["data"].x.at[1, 0, 0].set(jnp.nan)


def bad_d_params():
    return NET.init(jax.random.key(1), jnp.zeros((1, D + 2)))


def other_models():
    return F.init(bad_d_params(), K, CFG, key=KEY)


def nan_params():
    return jax.tree_util.tree_map(lambda a: a.at[(0,) * a.ndim].set(jnp.nan), v()["params"])


def losses():
    return jnp.ones((3, 2))


def r_block():
    return jnp.full((4, 4), 0.5)


def apply():
    return NET.apply


def one(i=0):
    """Client ``i``'s arrays ``(x, y, count, noise)``."""
    d = v()["data"]
    return d.x[i], d.y[i], d.count[i], d.noise[i]


def local_train(**kw):
    x, y, count, noise = one()
    args = dict(apply_fn=NET.apply, params=v()["params"], x=x, y=y, count=count, noise=noise,
                key=KEY, config=LOCAL)  # fmt: skip
    return F.local_train(**{**args, **kw})


def train_clients(**kw):
    d = v()["data"]
    args = dict(apply_fn=NET.apply, params=v()["params"], x=d.x, y=d.y, count=d.count,
                noise=d.noise, keys=jax.random.split(KEY, K), config=LOCAL)  # fmt: skip
    return F.train_clients(**{**args, **kw})


def rewards(**kw):
    args = dict(losses=losses(), weights=jnp.ones(3), mask=jnp.ones(3, bool))
    return F.gaussian_rewards(**{**args, **kw})


def interaction(**kw):
    args = dict(r_matrix=jnp.full((K, K), 0.1), idx=jnp.array([0, 2]), mask=jnp.ones(2, bool),
                rewards=jnp.array([0.5, 0.9]), alpha=0.5)  # fmt: skip
    return F.update_interaction(**{**args, **kw})


def convergence(**kw):
    args = dict(state=F.ConvergenceState.init((2,)), sse=jnp.ones(2), alpha=0.5, m=2, eps=1e-3)
    return F.convergence_step(**{**args, **kw})


def triggered_nan_state():
    s = v()["state"]
    conv = F.ConvergenceState(s.conv.mse, s.target)  # patience at its target: triggered
    return s.replace(r=s.r.at[0, 1].set(jnp.nan), conv=conv)


U32_3 = jnp.zeros(3, jnp.uint32)
F32_2 = jnp.zeros(2, jnp.float32)

# (entry point / argument, call, exception, message fragment)
CASES = [
    # ---- configs ----
    ("LocalConfig.steps float", lambda: F.LocalConfig(steps=2.5), ValueError, "`steps`"),
    ("LocalConfig.steps bool", lambda: F.LocalConfig(steps=True), ValueError, "`steps`"),
    ("LocalConfig.batch_size 0", lambda: F.LocalConfig(batch_size=0), ValueError, "`batch_size`"),
    ("LocalConfig.lr negative", lambda: F.LocalConfig(lr=-0.1), ValueError, "`lr`"),
    ("LocalConfig.lr str", lambda: F.LocalConfig(lr="0.1"), TypeError, "`lr`"),
    ("LocalConfig.lr nan", lambda: F.LocalConfig(lr=float("nan")), ValueError, "`lr`"),
    ("LocalConfig.momentum 1", lambda: F.LocalConfig(momentum=1.0), ValueError, "`momentum`"),
    (
        "LocalConfig.weight_decay inf",
        lambda: F.LocalConfig(weight_decay=float("inf")),
        ValueError,
        "`weight_decay`",
    ),
    ("LocalConfig.batching", lambda: F.LocalConfig(batching="random"), ValueError, "`batching`"),
    (
        "FedGWCConfig.participation 1.5",
        lambda: F.FedGWCConfig(participation=1.5),
        ValueError,
        "`participation`",
    ),
    (
        "FedGWCConfig.participation None",
        lambda: F.FedGWCConfig(participation=None),
        TypeError,
        "`participation`",
    ),
    (
        "FedGWCConfig.participation array",
        lambda: F.FedGWCConfig(participation=np.array([0.1, 0.2])),
        ValueError,
        "`participation`",
    ),
    ("FedGWCConfig.gamma 0", lambda: F.FedGWCConfig(gamma=0), ValueError, "`gamma`"),
    ("FedGWCConfig.eps nan", lambda: F.FedGWCConfig(eps=float("nan")), ValueError, "`eps`"),
    (
        "FedGWCConfig.max_clusters 2.5",
        lambda: F.FedGWCConfig(max_clusters=2.5),
        ValueError,
        "`max_clusters`",
    ),
    (
        "FedGWCConfig.max_candidates 2",
        lambda: F.FedGWCConfig(max_candidates=2),
        ValueError,
        "`max_candidates`",
    ),
    ("FedGWCConfig.local str", lambda: F.FedGWCConfig(local="fast"), ValueError, "`local`"),
    ("FedGWCConfig.seed -1", lambda: F.FedGWCConfig(seed=-1), ValueError, "`seed`"),
    (
        "FedGWCConfig.clients_per_round 0",
        lambda: CFG.clients_per_round(0),
        ValueError,
        "`num_clients`",
    ),
    ("CFLConfig.eps1 -1", lambda: F.CFLConfig(eps1=-1.0, eps2=1.0), ValueError, "`eps1`"),
    (
        "CFLConfig.check_every 0",
        lambda: F.CFLConfig(1.0, 1.0, check_every=0),
        ValueError,
        "`check_every`",
    ),
    ("CFLConfig.warmup 1.5", lambda: F.CFLConfig(1.0, 1.0, warmup=1.5), ValueError, "`warmup`"),
    # ---- make_fedgwc / make_ifca: the client data ----
    (
        "make_fedgwc data.y float",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(y=v()["data"].y.astype(jnp.float32))),
        TypeError,
        "`data.y`",
    ),
    (
        "make_fedgwc data.y shape",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(y=v()["data"].y[:, :-1])),
        ValueError,
        "`data.y`",
    ),
    (
        "make_fedgwc data.count 0",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(count=jnp.array([4, 0, 4, 4]))),
        ValueError,
        "`data.count`",
    ),
    (
        "make_fedgwc data.count > n_max",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(count=jnp.array([4, 9, 4, 4]))),
        ValueError,
        "`data.count`",
    ),
    (
        "make_fedgwc data.count float",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(count=jnp.full((K,), 4.0))),
        TypeError,
        "`data.count`",
    ),
    (
        "make_fedgwc data.count shape",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(count=jnp.full((K + 1,), 4))),
        ValueError,
        "`data.count`",
    ),
    (
        "make_fedgwc data.noise negative",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(noise=jnp.full((K,), -1.0))),
        ValueError,
        "`data.noise`",
    ),
    (
        "make_fedgwc data.x nan",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(x=x_nan())),
        ValueError,
        "`data.x`",
    ),
    (
        "make_fedgwc data.x rank 2",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(x=v()["data"].x[:, :, 0])),
        ValueError,
        "`data.x`",
    ),
    (
        "make_fedgwc data.x empty",
        lambda: F.make_fedgwc(
            CFG,
            NET.apply,
            F.ClientData(
                jnp.zeros((0, N, D)),
                jnp.zeros((0, N), jnp.int32),
                jnp.zeros((0,), jnp.int32),
                jnp.zeros((0,)),
            ),
        ),
        ValueError,
        "`data.x`",
    ),  # fmt: skip
    (
        "make_fedgwc data.y negative",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(y=v()["data"].y.at[0, 0].set(-1))),
        ValueError,
        "`data.y`",
    ),
    ("make_fedgwc data tuple", lambda: F.make_fedgwc(CFG, NET.apply, (1, 2)), ValueError, "`data`"),
    (
        "make_fedgwc config",
        lambda: F.make_fedgwc(LOCAL, NET.apply, v()["data"]),
        ValueError,
        "`config`",
    ),
    (
        "make_fedgwc apply_fn str",
        lambda: F.make_fedgwc(CFG, "mlp", v()["data"]),
        TypeError,
        "`apply_fn`",
    ),
    (
        "make_fedgwc mesh str",
        lambda: F.make_fedgwc(CFG, NET.apply, v()["data"], "data"),
        TypeError,
        "`mesh`",
    ),
    (
        "make_ifca data.count 1 < batch",
        lambda: F.make_ifca(CFG, NET.apply, data_with(count=jnp.array([4, 1, 4, 4]))),
        ValueError,
        "`data.count`",
    ),
    # ---- the factory's functions ----
    ("fed.init key int", lambda: v()["fed"].init(5, v()["params"]), ValueError, "`key`"),
    ("fed.init key float[2]", lambda: v()["fed"].init(F32_2, v()["params"]), ValueError, "`key`"),
    ("fed.init key uint32[3]", lambda: v()["fed"].init(U32_3, v()["params"]), ValueError, "`key`"),
    (
        "fed.init params for another d",
        lambda: v()["fed"].init(KEY, bad_d_params()),
        ValueError,
        "`params`",
    ),
    ("fed.init params nan", lambda: v()["fed"].init(KEY, nan_params()), ValueError, "`params`"),
    ("fed.init params None", lambda: v()["fed"].init(KEY, None), ValueError, "`params`"),
    (
        "fed.init labels >= classes",
        lambda: F.make_fedgwc(CFG, NET.apply, data_with(y=v()["data"].y.at[0, 0].set(5))).init(
            KEY, v()["params"]
        ),
        ValueError,
        "`data.y`",
    ),  # fmt: skip
    (
        "fed.run_rounds state for 5 clients",
        lambda: v()["fed"].run_rounds(v()["other_k"], 5),
        ValueError,
        "`state`",
    ),
    (
        "fed.run_rounds max_rounds 2.5",
        lambda: v()["fed"].run_rounds(v()["state"], 2.5),
        ValueError,
        "`max_rounds`",
    ),
    (
        "fed.run_rounds until -1",
        lambda: v()["fed"].run_rounds(v()["state"], 5, until=-1),
        ValueError,
        "`until`",
    ),
    (
        "fed.run_rounds until 2.5",
        lambda: v()["fed"].run_rounds(v()["state"], 5, until=2.5),
        TypeError,
        "`until`",
    ),
    (
        "fed.run_rounds slots 3",
        lambda: v()["fed"].run_rounds(v()["state"], 5, slots=3),
        ValueError,
        "`slots`",
    ),
    ("fed.step state for 3 slots", lambda: v()["fed"].step(v()["other_c"]), ValueError, "`state`"),
    (
        "fed.step models for another d",
        lambda: v()["fed"].step(other_models()),
        ValueError,
        "`state.params",
    ),
    (
        "round_step models for another d",
        lambda: F.round_step(other_models(), KEY, NET.apply, v()["data"], CFG),
        ValueError,
        "`state.params",
    ),
    (
        "ifca.step models for another d",
        lambda: v()["ifca"].step(
            v()["istate"].replace(
                params=F.random_inits(lambda k: NET.init(k, jnp.zeros((1, D + 2))), KEY, 2)
            )
        ),
        ValueError,
        "`state.params",
    ),  # fmt: skip
    ("fed.step state str", lambda: v()["fed"].step("state"), TypeError, "`state`"),
    ("fed.step x", lambda: v()["fed"].step(v()["state"], jnp.zeros(3)), ValueError, "`x`"),
    (
        "fed.fixed_clusters labels float",
        lambda: v()["fed"].fixed_clusters(KEY, v()["params"], np.zeros(K)),
        TypeError,
        "`labels`",
    ),
    (
        "fed.fixed_clusters labels shape",
        lambda: v()["fed"].fixed_clusters(KEY, v()["params"], np.zeros(K + 1, int)),
        ValueError,
        "`labels`",
    ),
    (
        "fed.fixed_clusters labels > slots",
        lambda: v()["fed"].fixed_clusters(KEY, v()["params"], np.arange(K)),
        ValueError,
        "`labels`",
    ),
    (
        "fed.fixed_clusters key",
        lambda: v()["fed"].fixed_clusters(1.0, v()["params"], np.zeros(K, int)),
        ValueError,
        "`key`",
    ),  # fmt: skip
    (
        "fed.local_only steps 0",
        lambda: v()["fed"].local_only(v()["params"], KEY, 0),
        ValueError,
        "`steps`",
    ),
    ("fed.local_only key", lambda: v()["fed"].local_only(v()["params"], 7, 1), ValueError, "`key`"),
    (
        "fed.client_deltas key",
        lambda: v()["fed"].client_deltas(v()["state"], "k"),
        ValueError,
        "`key`",
    ),
    (
        "fed.try_split state for 5 clients",
        lambda: v()["fed"].try_split(v()["other_k"]),
        ValueError,
        "`state`",
    ),
    (
        "fed.cfl_split splits str",
        lambda: v()["fed"].cfl_split(v()["state"], "splits"),
        TypeError,
        "`splits`",
    ),
    ("ifca.init key", lambda: v()["ifca"].init(U32_3, v()["inits"]), ValueError, "`key`"),
    (
        "ifca.init unstacked params",
        lambda: v()["ifca"].init(KEY, v()["params"]),
        ValueError,
        "`params`",
    ),
    (
        "ifca.run_rounds rounds 0",
        lambda: v()["ifca"].run_rounds(v()["istate"], 0),
        ValueError,
        "`rounds`",
    ),
    ("ifca.assign key", lambda: v()["ifca"].assign(v()["istate"], "k"), ValueError, "`key`"),
    # ---- module-level FedGWC functions ----
    ("init num_clients 0", lambda: F.init(v()["params"], 0, CFG), ValueError, "`num_clients`"),
    ("init config", lambda: F.init(v()["params"], K, "cfg"), TypeError, "`config`"),
    ("init key", lambda: F.init(v()["params"], K, CFG, key=3), ValueError, "`key`"),
    (
        "run_rounds key int",
        lambda: F.run_rounds(v()["state"], 3, 5, NET.apply, v()["data"], CFG),
        ValueError,
        "`key`",
    ),
    (
        "run_rounds max_rounds 0",
        lambda: F.run_rounds(v()["state"], KEY, 0, NET.apply, v()["data"], CFG),
        ValueError,
        "`max_rounds`",
    ),
    (
        "run_rounds data.noise nan",
        lambda: F.run_rounds(
            v()["state"], KEY, 2, NET.apply, data_with(noise=jnp.full((K,), jnp.nan)), CFG
        ),
        ValueError,
        "`data.noise`",
    ),  # fmt: skip
    (
        "round_step data.y shape",
        lambda: F.round_step(v()["state"], KEY, NET.apply, data_with(y=v()["data"].y[:2]), CFG),
        ValueError,
        "`data.y`",
    ),
    (
        "round_step state for 5 clients",
        lambda: F.round_step(v()["other_k"], KEY, NET.apply, v()["data"], CFG),
        ValueError,
        "`state`",
    ),
    (
        "round_step config for 3 slots",
        lambda: F.round_step(v()["state"], KEY, NET.apply, v()["data"], CFG3),
        ValueError,
        "`state`",
    ),
    ("triggered str", lambda: F.triggered("state"), TypeError, "`state`"),
    ("active_slots None", lambda: F.active_slots(None), TypeError, "`state`"),
    (
        "split_cluster cluster 5",
        lambda: F.split_cluster(v()["state"], 5, np.zeros(K, int), CFG),
        ValueError,
        "`cluster`",
    ),
    (
        "split_cluster children float",
        lambda: F.split_cluster(v()["state"], 0, np.zeros(K), CFG),
        TypeError,
        "`children`",
    ),
    ("try_split config None", lambda: F.try_split(v()["state"], None), TypeError, "`config`"),
    (
        "try_split non-finite R",
        lambda: F.try_split(triggered_nan_state(), CFG),
        ValueError,
        "`state.r`",
    ),
    # ---- interaction ----
    (
        "gaussian_rewards weights shape",
        lambda: rewards(weights=jnp.ones(4)),
        ValueError,
        "`weights`",
    ),
    (
        "gaussian_rewards losses nan",
        lambda: rewards(losses=losses().at[0, 0].set(jnp.nan)),
        ValueError,
        "`losses`",
    ),
    (
        "gaussian_rewards weights negative",
        lambda: rewards(weights=-jnp.ones(3)),
        ValueError,
        "`weights`",
    ),
    (
        "gaussian_rewards weights zero",
        lambda: rewards(weights=jnp.zeros(3)),
        ValueError,
        "`weights`",
    ),
    ("gaussian_rewards mask float", lambda: rewards(mask=jnp.ones(3)), TypeError, "`mask`"),
    ("gaussian_rewards losses rank 1", lambda: rewards(losses=jnp.ones(3)), ValueError, "`losses`"),
    ("gaussian_rewards losses list of str", lambda: rewards(losses=[["a"]]), TypeError, "`losses`"),
    (
        "update_interaction r not square",
        lambda: interaction(r_matrix=jnp.ones((K, K + 1))),
        ValueError,
        "`r_matrix`",
    ),
    (
        "update_interaction idx out of range",
        lambda: interaction(idx=jnp.array([0, K])),
        ValueError,
        "`idx`",
    ),
    (
        "update_interaction idx float",
        lambda: interaction(idx=jnp.array([0.0, 1.0])),
        TypeError,
        "`idx`",
    ),
    ("update_interaction alpha 1.5", lambda: interaction(alpha=1.5), ValueError, "`alpha`"),
    (
        "update_interaction rewards inf",
        lambda: interaction(rewards=jnp.array([0.5, jnp.inf])),
        ValueError,
        "`rewards`",
    ),
    ("convergence_step state", lambda: convergence(state=(1, 2)), TypeError, "`state`"),
    ("convergence_step sse negative", lambda: convergence(sse=-jnp.ones(2)), ValueError, "`sse`"),
    ("convergence_step alpha 2", lambda: convergence(alpha=2.0), ValueError, "`alpha`"),
    ("convergence_step m 0", lambda: convergence(m=0), ValueError, "`m`"),
    ("convergence_step eps 0", lambda: convergence(eps=0.0), ValueError, "`eps`"),
    # ---- clustering and cohesion ----
    ("affinity not square", lambda: F.affinity(jnp.ones((3, 4))), ValueError, "`r_block`"),
    ("affinity gamma -1", lambda: F.affinity(r_block(), -1.0), ValueError, "`gamma`"),
    ("affinity gamma bool", lambda: F.affinity(r_block(), True), TypeError, "`gamma`"),
    ("affinity nan", lambda: F.affinity(r_block().at[0, 0].set(jnp.nan)), ValueError, "`r_block`"),
    ("affinity str", lambda: F.affinity("abc"), TypeError, "`r_block`"),
    ("select_split m 0", lambda: F.select_split(np.ones((4, 4)), 0), ValueError, "`m`"),
    ("select_split a not square", lambda: F.select_split(np.ones((3, 4)), 1), ValueError, "`a`"),
    (
        "select_split seed -1",
        lambda: F.select_split(np.ones((4, 4)), 1, seed=-1),
        ValueError,
        "`seed`",
    ),
    ("select_split a nan", lambda: F.select_split(np.full((4, 4), np.nan), 1), ValueError, "`a`"),
    ("select_split a negative", lambda: F.select_split(-np.ones((4, 4)), 1), ValueError, "`a`"),
    (
        "class_cohesion_scores labels float",
        lambda: F.class_cohesion_scores(np.ones((4, 3)), np.zeros(4)),
        TypeError,
        "`labels`",
    ),
    (
        "class_cohesion_scores hist nan",
        lambda: F.class_cohesion_scores(np.full((4, 3), np.nan), np.zeros(4, int)),
        ValueError,
        "`hist`",
    ),
    (
        "class_cohesion_scores hist rank 1",
        lambda: F.class_cohesion_scores(np.ones(4), np.zeros(4, int)),
        ValueError,
        "`hist`",
    ),
    (
        "class_cohesion_scores hist negative",
        lambda: F.class_cohesion_scores(-np.ones((4, 3)), np.zeros(4, int)),
        ValueError,
        "`hist`",
    ),
    (
        "tv_distances q columns",
        lambda: F.tv_distances(np.ones((2, 3)), np.ones((2, 4))),
        ValueError,
        "`q`",
    ),
    ("tv_distances str", lambda: F.tv_distances("p"), TypeError, "`p`"),
    # ---- rounds ----
    (
        "sample_clients members int",
        lambda: F.sample_clients(KEY, jnp.ones(K, int), 2),
        TypeError,
        "`members`",
    ),
    ("sample_clients m 0", lambda: F.sample_clients(KEY, jnp.ones(K, bool), 0), ValueError, "`m`"),
    (
        "sample_clients m > K",
        lambda: F.sample_clients(KEY, jnp.ones(K, bool), 10),
        ValueError,
        "`m`",
    ),
    (
        "sample_clients key int",
        lambda: F.sample_clients(7, jnp.ones(K, bool), 2),
        ValueError,
        "`key`",
    ),
    (
        "epoch_batch batch_size > n_max",
        lambda: F.epoch_batch(KEY, 4, 4, 5, 0),
        ValueError,
        "`batch_size`",
    ),
    ("epoch_batch count 0", lambda: F.epoch_batch(KEY, 0, 4, 2, 0), ValueError, "`count`"),
    ("epoch_batch step -1", lambda: F.epoch_batch(KEY, 4, 4, 2, -1), ValueError, "`step`"),
    ("local_train y float", lambda: local_train(y=one()[1].astype(jnp.float32)), TypeError, "`y`"),
    ("local_train count 0", lambda: local_train(count=0), ValueError, "`count`"),
    ("local_train noise -1", lambda: local_train(noise=-1.0), ValueError, "`noise`"),
    ("local_train key uint32[3]", lambda: local_train(key=U32_3), ValueError, "`key`"),
    ("local_train x nan", lambda: local_train(x=one()[0].at[0, 0].set(jnp.inf)), ValueError, "`x`"),
    ("local_train config", lambda: local_train(config=CFG), TypeError, "`config`"),
    ("local_train params None", lambda: local_train(params=None), ValueError, "`params`"),
    (
        "local_train params of another d",
        lambda: local_train(params=bad_d_params()),
        ValueError,
        "`params`",
    ),
    (
        "local_train label >= classes",
        lambda: local_train(y=one()[1].at[0].set(3)),
        ValueError,
        "`y`",
    ),
    (
        "ifca_losses models of another d",
        lambda: F.ifca_losses(
            NET.apply,
            F.random_inits(lambda k: NET.init(k, jnp.zeros((1, D + 2))), KEY, 2),
            *one()[:3],
            0.0,
            KEY,
        ),
        ValueError,
        "`params`",
    ),  # fmt: skip
    (
        "local_only params of another d",
        lambda: F.local_only(NET.apply, bad_d_params(), v()["data"], KEY, 1, LOCAL),
        ValueError,
        "`params`",
    ),
    (
        "ConvergenceState.init shape -1",
        lambda: F.ConvergenceState.init((-1,)),
        ValueError,
        "`shape`",
    ),
    (
        "local_step rows out of range",
        lambda: F.local_step(
            NET.apply,
            v()["params"],
            LOCAL.optimizer().init(v()["params"]),
            *one(),
            KEY,
            LOCAL,
            rows=jnp.array([0, 9]),
        ),
        ValueError,
        "`rows`",
    ),  # fmt: skip
    (
        "local_batches y shape",
        lambda: F.local_batches(one()[0], one()[1][:2], one()[2], one()[3], KEY, LOCAL),
        ValueError,
        "`y`",
    ),
    (
        "train_clients keys count",
        lambda: train_clients(keys=jax.random.split(KEY, K + 1)),
        ValueError,
        "`keys`",
    ),
    ("train_clients shared str", lambda: train_clients(shared="yes"), TypeError, "`shared`"),
    (
        "train_clients stacked params size",
        lambda: train_clients(params=v()["inits"], shared=False),
        ValueError,
        "`params`",
    ),
    (
        "fedavg weights negative",
        lambda: F.fedavg(v()["stacked"], -jnp.ones(K)),
        ValueError,
        "`weights`",
    ),
    (
        "fedavg weights length",
        lambda: F.fedavg(v()["stacked"], jnp.ones(K + 1)),
        ValueError,
        "`client_params`",
    ),
    (
        "fedavg weights zero",
        lambda: F.fedavg(v()["stacked"], jnp.zeros(K)),
        ValueError,
        "`weights`",
    ),
    (
        "federated_round idx out of range",
        lambda: F.federated_round(
            NET.apply, v()["params"], v()["data"], jnp.array([0, K]), jnp.ones(2, bool), KEY, LOCAL
        ),
        ValueError,
        "`idx`",
    ),  # fmt: skip
    (
        "federated_round mask shape",
        lambda: F.federated_round(
            NET.apply, v()["params"], v()["data"], jnp.array([0, 1]), jnp.ones(3, bool), KEY, LOCAL
        ),
        ValueError,
        "`mask`",
    ),  # fmt: skip
    # ---- baselines ----
    (
        "fixed_clusters slot skipped",
        lambda: F.fixed_clusters(v()["params"], np.array([0, 2] * 2), CFG3),
        ValueError,
        "`labels`",
    ),  # fmt: skip
    (
        "fixed_clusters empty",
        lambda: F.fixed_clusters(v()["params"], np.zeros(0, int), CFG),
        ValueError,
        "`labels`",
    ),
    (
        "random_inits k 2.5",
        lambda: F.random_inits(lambda k: v()["params"], KEY, 2.5),
        ValueError,
        "`k`",
    ),
    (
        "random_inits apply_init str",
        lambda: F.random_inits("init", KEY, 2),
        TypeError,
        "`apply_init`",
    ),
    ("ifca_init key", lambda: F.ifca_init(lambda k: v()["params"], "key", 2), ValueError, "`key`"),
    (
        "ifca_losses count 99",
        lambda: F.ifca_losses(NET.apply, v()["inits"], one()[0], one()[1], 99, 0.0, KEY),
        ValueError,
        "`count`",
    ),
    (
        "ifca_round m 0",
        lambda: F.ifca_round(v()["istate"], KEY, NET.apply, v()["data"], 0, LOCAL),
        ValueError,
        "`m`",
    ),
    (
        "ifca_run rounds 0",
        lambda: F.ifca_run(v()["istate"], KEY, 0, NET.apply, v()["data"], 2, LOCAL),
        ValueError,
        "`rounds`",
    ),
    (
        "ifca_assign key float",
        lambda: F.ifca_assign(NET.apply, v()["inits"], v()["data"], 1.5),
        ValueError,
        "`key`",
    ),
    (
        "cfl_check updates nan",
        lambda: F.cfl_check(np.full((K, 3), np.nan), np.zeros(K, int), np.ones(2, bool), CFL),
        ValueError,
        "`updates`",
    ),
    (
        "cfl_check labels length",
        lambda: F.cfl_check(np.ones((K, 3)), np.zeros(K + 1, int), np.ones(2, bool), CFL),
        ValueError,
        "`labels`",
    ),
    (
        "cfl_check config",
        lambda: F.cfl_check(np.ones((K, 3)), np.zeros(K, int), np.ones(2, bool), CFG),
        TypeError,
        "`config`",
    ),  # fmt: skip
    (
        "client_deltas state for 5 clients",
        lambda: F.client_deltas(NET.apply, v()["other_k"], v()["data"], KEY, LOCAL),
        ValueError,
        "`state`",
    ),
    (
        "local_only steps 2.5",
        lambda: F.local_only(NET.apply, v()["params"], v()["data"], KEY, 2.5, LOCAL),
        ValueError,
        "`steps`",
    ),
    (
        "cfl_split cluster 5",
        lambda: F.cfl_split(v()["state"], [(5, np.zeros(K, int))], CFG),
        ValueError,
        "`cluster`",
    ),
]

CASES += [
    (
        "local_step opt_state",
        lambda: F.local_step(NET.apply, v()["params"], (), *one(), KEY, LOCAL),
        ValueError,
        "`opt_state`",
    ),  # fmt: skip
    (
        "epoch_batch step array",
        lambda: F.epoch_batch(KEY, 4, 4, 2, jnp.arange(2)),
        ValueError,
        "`step`",
    ),
    ("convergence_step m array", lambda: convergence(m=jnp.arange(2)), ValueError, "`m`"),
]


@pytest.mark.parametrize(("call", "exc", "fragment"), [c[1:] for c in CASES],
                         ids=[c[0] for c in CASES])  # fmt: skip
def test_bad_input_gets_a_clear_error(call, exc, fragment):
    with pytest.raises(exc, match=fragment.replace("[", r"\[").replace(".", r"\.")):
        call()


def test_the_table_is_large_and_names_are_unique():
    assert len(CASES) >= 80
    assert len({c[0] for c in CASES}) == len(CASES)


def test_valid_tiny_inputs_pass_the_checks():
    # the valid inputs of the table are accepted (so each case fails on its bad argument only)
    fed = v()["fed"]
    assert F.active_slots(v()["state"]) == 1 and not bool(fed.triggered(v()["state"]).any())
    F.gaussian_rewards(losses(), jnp.ones(3), jnp.ones(3, bool))
    F.fedavg(v()["stacked"], jnp.ones(K))


def test_legacy_uint32_key_is_accepted():
    legacy = jax.random.PRNGKey(0)
    state = v()["fed"].init(legacy, v()["params"])
    assert jax.dtypes.issubdtype(state.key.dtype, jax.dtypes.prng_key)
    np.testing.assert_array_equal(jax.random.key_data(state.key), legacy)


def test_a_diverged_round_is_flagged_not_reported():
    fed, state = v()["fed"], v()["state"]
    _, ok = fed.step(state)
    assert bool(ok["finite"]) and np.isfinite(float(ok["loss"]))
    nan = state.replace(params=jax.tree_util.tree_map(lambda a: a * jnp.nan, state.params))
    _, metrics = fed.step(nan)  # the same compiled round
    assert not bool(metrics["finite"]) and np.isnan(float(metrics["loss"]))
