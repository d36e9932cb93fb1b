"""The keras.io GAN and VAE patterns (two models and two optimizers; a sampling layer with
kiln.random and a SeedGenerator), with only the imports changed, train in one compiled step
each to falling losses."""

from __future__ import annotations

import numpy as np

import kiln
from kiln import layers, ops


class GAN(kiln.Model):
    """keras.io "DCGAN: overriding train_step", on 2-D points (tf.* -> kiln.*)."""

    def __init__(self, discriminator, generator, latent_dim):
        super().__init__()
        self.discriminator = discriminator
        self.generator = generator
        self.latent_dim = latent_dim
        self.seed_generator = kiln.random.SeedGenerator(1337)

    def compile(self, d_optimizer, g_optimizer, loss_fn):
        super().compile()
        self.d_optimizer = d_optimizer
        self.g_optimizer = g_optimizer
        self.loss_fn = loss_fn
        self.d_loss_metric = kiln.metrics.Mean(name="d_loss")
        self.g_loss_metric = kiln.metrics.Mean(name="g_loss")

    @property
    def metrics(self):
        return [self.d_loss_metric, self.g_loss_metric]

    def train_step(self, real_images):
        batch_size = ops.shape(real_images)[0]
        random_latent_vectors = kiln.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        generated_images = self.generator(random_latent_vectors)
        combined_images = ops.concatenate([generated_images, real_images], axis=0)
        labels = ops.concatenate([ops.ones((batch_size, 1)), ops.zeros((batch_size, 1))],
                                 axis=0)
        labels += 0.05 * kiln.random.uniform(ops.shape(labels), seed=self.seed_generator)
        with kiln.GradientTape() as tape:
            predictions = self.discriminator(combined_images)
            d_loss = self.loss_fn(labels, predictions)
        grads = tape.gradient(d_loss, self.discriminator.trainable_weights)
        self.d_optimizer.apply_gradients(zip(grads, self.discriminator.trainable_weights))
        random_latent_vectors = kiln.random.normal(
            shape=(batch_size, self.latent_dim), seed=self.seed_generator)
        misleading_labels = ops.zeros((batch_size, 1))
        with kiln.GradientTape() as tape:
            predictions = self.discriminator(self.generator(random_latent_vectors))
            g_loss = self.loss_fn(misleading_labels, predictions)
        grads = tape.gradient(g_loss, self.generator.trainable_weights)
        self.g_optimizer.apply_gradients(zip(grads, self.generator.trainable_weights))
        self.d_loss_metric.update_state(d_loss)
        self.g_loss_metric.update_state(g_loss)
        return {"d_loss": self.d_loss_metric.result(), "g_loss": self.g_loss_metric.result()}


def make_gan(latent_dim=4):
    kiln.utils.set_random_seed(7)
    discriminator = kiln.Sequential([kiln.Input((2,)), layers.Dense(16, activation="relu"),
                                     layers.Dense(1, activation="sigmoid")],
                                    name="discriminator")
    generator = kiln.Sequential([kiln.Input((latent_dim,)), layers.Dense(16, activation="relu"),
                                 layers.Dense(2)], name="generator")
    gan = GAN(discriminator, generator, latent_dim)
    gan.compile(d_optimizer=kiln.optimizers.Adam(0.003),
                g_optimizer=kiln.optimizers.Adam(0.003),
                loss_fn=kiln.losses.BinaryCrossentropy())
    return gan


def test_gan_trains_both_models_in_one_step(monkeypatch):
    calls = []
    real = kiln.core.function
    monkeypatch.setattr(kiln.core, "function",
                        lambda *a, **k: calls.append(k.get("name")) or real(*a, **k))
    rng = np.random.default_rng(0)
    # the real data: points on a ring of radius 2 around (3, -1)
    angle = rng.uniform(0, 2 * np.pi, 1024)
    real_points = np.stack([3 + 2 * np.cos(angle), -1 + 2 * np.sin(angle)], 1).astype("float32")
    gan = make_gan()
    z = kiln.random.normal((512, 4), seed=3)

    def distance_to_data():
        """How far the generated points are from the ring: centre offset + radius error."""
        fake = gan.generator.predict(z, verbose=0)
        centre = fake.mean(0)
        radius = np.linalg.norm(fake - [3, -1], axis=1).mean()
        return float(np.linalg.norm(centre - [3, -1]) + abs(radius - 2))

    start = distance_to_data()
    g_before = [w.copy() for w in gan.generator.get_weights()]
    d_before = [w.copy() for w in gan.discriminator.get_weights()]
    hist = gan.fit(real_points, batch_size=64, epochs=12, verbose=0).history
    assert calls.count("train_function") == 1
    assert sorted(hist) == ["d_loss", "g_loss"] and len(hist["d_loss"]) == 12
    # each optimizer moved its own model (and counted its own steps)
    assert int(gan.d_optimizer.iterations.value) == 12 * 16
    assert int(gan.g_optimizer.iterations.value) == 12 * 16
    assert all(not np.allclose(a, b) for a, b in zip(gan.generator.get_weights(), g_before))
    assert all(not np.allclose(a, b) for a, b in zip(gan.discriminator.get_weights(),
                                                     d_before))
    # the generator learns: its samples move from around the origin towards the ring. (A
    # GAN's two losses do not both fall: the better the generator, the higher d_loss.)
    end = distance_to_data()
    assert end < 0.35 * start, (start, end)
    assert hist["d_loss"][0] < np.log(2)  # the discriminator learned to tell them apart


class Sampling(layers.Layer):
    """keras.io VAE: z = mean + exp(log_var / 2) * epsilon, epsilon from kiln.random."""

    def __init__(self, **kwargs):
        super().__init__(**kwargs)
        self.seed_generator = kiln.random.SeedGenerator(1337)

    def call(self, inputs):
        z_mean, z_log_var = inputs
        batch = ops.shape(z_mean)[0]
        dim = ops.shape(z_mean)[1]
        epsilon = kiln.random.normal(shape=(batch, dim), seed=self.seed_generator)
        return z_mean + ops.exp(0.5 * z_log_var) * epsilon


class VAE(kiln.Model):
    def __init__(self, encoder, decoder, **kwargs):
        super().__init__(**kwargs)
        self.encoder = encoder
        self.decoder = decoder
        self.total_loss_tracker = kiln.metrics.Mean(name="total_loss")
        self.reconstruction_loss_tracker = kiln.metrics.Mean(name="reconstruction_loss")
        self.kl_loss_tracker = kiln.metrics.Mean(name="kl_loss")

    @property
    def metrics(self):
        return [self.total_loss_tracker, self.reconstruction_loss_tracker,
                self.kl_loss_tracker]

    def train_step(self, data):
        with kiln.GradientTape() as tape:
            z_mean, z_log_var, z = self.encoder(data)
            reconstruction = self.decoder(z)
            reconstruction_loss = ops.mean(ops.sum(
                kiln.losses.binary_crossentropy(data, reconstruction), axis=1))
            kl_loss = -0.5 * (1 + z_log_var - ops.square(z_mean) - ops.exp(z_log_var))
            kl_loss = ops.mean(ops.sum(kl_loss, axis=1))
            total_loss = reconstruction_loss + kl_loss
        grads = tape.gradient(total_loss, self.trainable_weights)
        self.optimizer.apply_gradients(zip(grads, self.trainable_weights))
        self.total_loss_tracker.update_state(total_loss)
        self.reconstruction_loss_tracker.update_state(reconstruction_loss)
        self.kl_loss_tracker.update_state(kl_loss)
        return {"loss": self.total_loss_tracker.result(),
                "reconstruction_loss": self.reconstruction_loss_tracker.result(),
                "kl_loss": self.kl_loss_tracker.result()}


def test_vae_trains_with_sampling_from_kiln_random(monkeypatch):
    calls = []
    real = kiln.core.function
    monkeypatch.setattr(kiln.core, "function",
                        lambda *a, **k: calls.append(k.get("name")) or real(*a, **k))
    kiln.utils.set_random_seed(3)
    latent_dim, d = 2, 16
    enc_in = kiln.Input((d, 1))  # "pixels" with a channel axis, as the keras.io VAE's images
    h = layers.Dense(32, activation="relu")(layers.Flatten()(enc_in))
    z_mean = layers.Dense(latent_dim, name="z_mean")(h)
    z_log_var = layers.Dense(latent_dim, name="z_log_var")(h)
    z = Sampling()([z_mean, z_log_var])
    encoder = kiln.Model(enc_in, [z_mean, z_log_var, z], name="encoder")
    dec_in = kiln.Input((latent_dim,))
    out = layers.Dense(d, activation="sigmoid")(layers.Dense(32, activation="relu")(dec_in))
    out = layers.Reshape((d, 1))(out)
    decoder = kiln.Model(dec_in, out, name="decoder")
    rng = np.random.default_rng(0)
    # binary patterns generated by 2 latent factors
    codes = rng.integers(0, 4, (512, 2))
    data = np.zeros((512, d), "float32")
    for i, (a, b) in enumerate(codes):
        data[i, a * 4:(a + 1) * 4] = 1
        data[i, 8 + b * 2:8 + b * 2 + 2] = 1
    data = data[..., None]
    vae = VAE(encoder, decoder)
    vae.compile(optimizer=kiln.optimizers.Adam(0.01))
    hist = vae.fit(data, epochs=8, batch_size=64, verbose=0).history
    assert calls.count("train_function") == 1  # one compiled step for the whole fit
    assert sorted(hist) == ["kl_loss", "loss", "reconstruction_loss"]
    assert hist["loss"][-1] < 0.75 * hist["loss"][0]
    assert hist["reconstruction_loss"][-1] < hist["reconstruction_loss"][0]
    np.testing.assert_allclose(np.add(hist["reconstruction_loss"], hist["kl_loss"]),
                               hist["loss"], rtol=1e-5)
    # the sampling layer draws new noise every step: two runs of the encoder in training
    # mode on the same data differ only through epsilon (mean and log-variance agree)
    m1, v1, _ = encoder.predict(data[:8], verbose=0)
    np.testing.assert_allclose(m1, encoder.predict(data[:8], verbose=0)[0])
