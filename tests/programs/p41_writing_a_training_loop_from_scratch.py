"""Writing a training loop from scratch (eager, with keras.GradientTape).

Source: https://keras.io/guides/writing_a_custom_training_loop_in_tensorflow/
(keras-team/keras-io, guides/writing_a_custom_training_loop_in_tensorflow.py, Keras 3 version).
Unlike p30 (the same guide with TensorFlow's tape and tf.data kept), this one uses Keras names
only: the eager loops run on kiln's eager GradientTape (kiln/tape.py).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``; ``import tensorflow as tf`` and
  ``os.environ["KERAS_BACKEND"] = "tensorflow"`` removed;
- ``tf.GradientTape`` -> ``keras.GradientTape``; ``tf.random.normal`` / ``tf.random.uniform``
  -> ``keras.random.normal`` / ``keras.random.uniform``; ``tf.concat`` ->
  ``keras.ops.concatenate``; ``tf.ones`` / ``tf.zeros`` -> ``keras.ops.ones`` /
  ``keras.ops.zeros``; ``tf.reduce_sum`` -> ``keras.ops.sum``;
- ``@tf.function`` removed from ``train_step`` / ``test_step``: kiln compiles every eager call
  and caches the tape's gradient function, which is what the decorator was for;
- data: the MNIST sample shipped with kiln (``keras.datasets.mnist.load_sample()``, first
  4,000 train / 1,000 test images) instead of ``keras.datasets.mnist.load_data()``; 1,000
  validation samples instead of 10,000; ``tf.data.Dataset.from_tensor_slices(...).shuffle(
  1024).batch(batch_size)`` -> a small NumPy batching generator (``batches``, shuffled the
  same way for the training set);
- epochs: 1 instead of 3 and 2; the GAN loop stops after step 2 instead of 10, on 640 digits;
  its image is saved only at step 0;
- the regularized ``train_step`` (which the guide only defines) is run for one epoch with a
  fresh Adam, and ``final loss:`` printed.
"""

# ruff: noqa: I001, UP031, UP032, F811, E402  (kept as in the original text)

import time
import os

import kiln as keras
from kiln import layers
import numpy as np


def batches(*arrays, batch_size, shuffle=False, seed=0):
    # (adapted: tf.data's from_tensor_slices(...).shuffle(...).batch(...))
    order = np.arange(len(arrays[0]))
    if shuffle:
        np.random.default_rng(seed).shuffle(order)
    for start in range(0, len(order), batch_size):
        idx = order[start:start + batch_size]
        out = tuple(a[idx] for a in arrays)
        yield out if len(out) > 1 else out[0]


def get_model():
    inputs = keras.Input(shape=(784,), name="digits")
    x1 = keras.layers.Dense(64, activation="relu")(inputs)
    x2 = keras.layers.Dense(64, activation="relu")(x1)
    outputs = keras.layers.Dense(10, name="predictions")(x2)
    model = keras.Model(inputs=inputs, outputs=outputs)
    return model


model = get_model()

# Instantiate an optimizer.
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
# Instantiate a loss function.
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# Prepare the training dataset.
batch_size = 32
# (adapted: kiln's shipped MNIST sample, no download)
(x_train, y_train), (x_test, y_test) = keras.datasets.mnist.load_sample()
x_train, y_train, x_test, y_test = x_train[:4000], y_train[:4000], x_test[:1000], y_test[:1000]
x_train = np.reshape(x_train, (-1, 784)).astype("float32") / 255.0
x_test = np.reshape(x_test, (-1, 784)).astype("float32") / 255.0

# Reserve 1,000 samples for validation.
x_val = x_train[-1000:]
y_val = y_train[-1000:]
x_train = x_train[:-1000]
y_train = y_train[:-1000]


def train_dataset():
    return batches(x_train, y_train, batch_size=batch_size, shuffle=True)


def val_dataset():
    return batches(x_val, y_val, batch_size=batch_size)


epochs = 1
for epoch in range(epochs):
    print(f"\nStart of epoch {epoch}")

    # Iterate over the batches of the dataset.
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset()):
        # Open a GradientTape to record the operations run
        # during the forward pass, which enables auto-differentiation.
        with keras.GradientTape() as tape:
            # Run the forward pass of the layer.
            # The operations that the layer applies
            # to its inputs are going to be recorded
            # on the GradientTape.
            logits = model(x_batch_train, training=True)  # Logits for this minibatch

            # Compute the loss value for this minibatch.
            loss_value = loss_fn(y_batch_train, logits)

        # Use the gradient tape to automatically retrieve
        # the gradients of the trainable variables with respect to the loss.
        grads = tape.gradient(loss_value, model.trainable_weights)

        # Run one step of gradient descent by updating
        # the value of the variables to minimize the loss.
        optimizer.apply(grads, model.trainable_weights)

        # Log every 100 batches.
        if step % 100 == 0:
            print(
                f"Training loss (for 1 batch) at step {step}: {float(loss_value):.4f}"
            )
            print(f"Seen so far: {(step + 1) * batch_size} samples")

# Get a fresh model
model = get_model()

# Instantiate an optimizer to train the model.
optimizer = keras.optimizers.Adam(learning_rate=1e-3)
# Instantiate a loss function.
loss_fn = keras.losses.SparseCategoricalCrossentropy(from_logits=True)

# Prepare the metrics.
train_acc_metric = keras.metrics.SparseCategoricalAccuracy()
val_acc_metric = keras.metrics.SparseCategoricalAccuracy()

epochs = 1
for epoch in range(epochs):
    print(f"\nStart of epoch {epoch}")
    start_time = time.time()

    # Iterate over the batches of the dataset.
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset()):
        with keras.GradientTape() as tape:
            logits = model(x_batch_train, training=True)
            loss_value = loss_fn(y_batch_train, logits)
        grads = tape.gradient(loss_value, model.trainable_weights)
        optimizer.apply(grads, model.trainable_weights)

        # Update training metric.
        train_acc_metric.update_state(y_batch_train, logits)

        # Log every 100 batches.
        if step % 100 == 0:
            print(
                f"Training loss (for 1 batch) at step {step}: {float(loss_value):.4f}"
            )
            print(f"Seen so far: {(step + 1) * batch_size} samples")

    # Display metrics at the end of each epoch.
    train_acc = train_acc_metric.result()
    print(f"Training acc over epoch: {float(train_acc):.4f}")

    # Reset training metrics at the end of each epoch
    train_acc_metric.reset_state()

    # Run a validation loop at the end of each epoch.
    for x_batch_val, y_batch_val in val_dataset():
        val_logits = model(x_batch_val, training=False)
        # Update val metrics
        val_acc_metric.update_state(y_batch_val, val_logits)
    val_acc = val_acc_metric.result()
    val_acc_metric.reset_state()
    print(f"Validation acc: {float(val_acc):.4f}")
    print(f"Time taken: {time.time() - start_time:.2f}s")


def train_step(x, y):  # (adapted: @tf.function removed)
    with keras.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
    train_acc_metric.update_state(y, logits)
    return loss_value


def test_step(x, y):  # (adapted: @tf.function removed)
    val_logits = model(x, training=False)
    val_acc_metric.update_state(y, val_logits)


epochs = 1
for epoch in range(epochs):
    print(f"\nStart of epoch {epoch}")
    start_time = time.time()

    # Iterate over the batches of the dataset.
    for step, (x_batch_train, y_batch_train) in enumerate(train_dataset()):
        loss_value = train_step(x_batch_train, y_batch_train)

        # Log every 100 batches.
        if step % 100 == 0:
            print(
                f"Training loss (for 1 batch) at step {step}: {float(loss_value):.4f}"
            )
            print(f"Seen so far: {(step + 1) * batch_size} samples")

    # Display metrics at the end of each epoch.
    train_acc = train_acc_metric.result()
    print(f"Training acc over epoch: {float(train_acc):.4f}")

    # Reset training metrics at the end of each epoch
    train_acc_metric.reset_state()

    # Run a validation loop at the end of each epoch.
    for x_batch_val, y_batch_val in val_dataset():
        test_step(x_batch_val, y_batch_val)

    val_acc = val_acc_metric.result()
    val_acc_metric.reset_state()
    print(f"Validation acc: {float(val_acc):.4f}")
    print(f"Time taken: {time.time() - start_time:.2f}s")


class ActivityRegularizationLayer(keras.layers.Layer):
    def call(self, inputs):
        self.add_loss(1e-2 * keras.ops.sum(inputs))
        return inputs


inputs = keras.Input(shape=(784,), name="digits")
x = keras.layers.Dense(64, activation="relu")(inputs)
# Insert activity regularization as a layer
x = ActivityRegularizationLayer()(x)
x = keras.layers.Dense(64, activation="relu")(x)
outputs = keras.layers.Dense(10, name="predictions")(x)

model = keras.Model(inputs=inputs, outputs=outputs)


def train_step(x, y):  # (adapted: @tf.function removed)
    with keras.GradientTape() as tape:
        logits = model(x, training=True)
        loss_value = loss_fn(y, logits)
        # Add any extra losses created during the forward pass.
        loss_value += sum(model.losses)
    grads = tape.gradient(loss_value, model.trainable_weights)
    optimizer.apply(grads, model.trainable_weights)
    train_acc_metric.update_state(y, logits)
    return loss_value


optimizer = keras.optimizers.Adam(learning_rate=1e-3)  # (adapted: a fresh optimizer)
for x_batch_train, y_batch_train in train_dataset():  # (adapted: the guide only defines it)
    loss_value = train_step(x_batch_train, y_batch_train)
print(f"final loss: {float(loss_value):.4f}")  # (adapted: printed for the test)

# Create the discriminator
discriminator = keras.Sequential(
    [
        keras.Input(shape=(28, 28, 1)),
        layers.Conv2D(64, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(128, (3, 3), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.GlobalMaxPooling2D(),
        layers.Dense(1),
    ],
    name="discriminator",
)
discriminator.summary()

latent_dim = 128

generator = keras.Sequential(
    [
        keras.Input(shape=(latent_dim,)),
        # We want to generate 128 coefficients to reshape into a 7x7x128 map
        layers.Dense(7 * 7 * 128),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Reshape((7, 7, 128)),
        layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2DTranspose(128, (4, 4), strides=(2, 2), padding="same"),
        layers.LeakyReLU(negative_slope=0.2),
        layers.Conv2D(1, (7, 7), padding="same", activation="sigmoid"),
    ],
    name="generator",
)

# Instantiate one optimizer for the discriminator and another for the generator.
d_optimizer = keras.optimizers.Adam(learning_rate=0.0003)
g_optimizer = keras.optimizers.Adam(learning_rate=0.0004)

# Instantiate a loss function.
loss_fn = keras.losses.BinaryCrossentropy(from_logits=True)


def train_step(real_images):  # (adapted: @tf.function removed)
    # Sample random points in the latent space
    random_latent_vectors = keras.random.normal(shape=(batch_size, latent_dim))
    # Decode them to fake images
    generated_images = generator(random_latent_vectors)
    # Combine them with real images
    combined_images = keras.ops.concatenate([generated_images, real_images], axis=0)

    # Assemble labels discriminating real from fake images
    labels = keras.ops.concatenate(
        [keras.ops.ones((batch_size, 1)), keras.ops.zeros((real_images.shape[0], 1))],
        axis=0,
    )
    # Add random noise to the labels - important trick!
    labels += 0.05 * keras.random.uniform(labels.shape)

    # Train the discriminator
    with keras.GradientTape() as tape:
        predictions = discriminator(combined_images)
        d_loss = loss_fn(labels, predictions)
    grads = tape.gradient(d_loss, discriminator.trainable_weights)
    d_optimizer.apply(grads, discriminator.trainable_weights)

    # Sample random points in the latent space
    random_latent_vectors = keras.random.normal(shape=(batch_size, latent_dim))
    # Assemble labels that say "all real images"
    misleading_labels = keras.ops.zeros((batch_size, 1))

    # Train the generator (note that we should *not* update the weights
    # of the discriminator)!
    with keras.GradientTape() as tape:
        predictions = discriminator(generator(random_latent_vectors))
        g_loss = loss_fn(misleading_labels, predictions)
    grads = tape.gradient(g_loss, generator.trainable_weights)
    g_optimizer.apply(grads, generator.trainable_weights)
    return d_loss, g_loss, generated_images


# Prepare the dataset. We use both the training & test MNIST digits.
batch_size = 64
all_digits = np.concatenate([x_train, x_test])[:640]  # (adapted: 640 of the sample)
all_digits = all_digits.astype("float32")  # (adapted: already scaled to [0, 1] above)
all_digits = np.reshape(all_digits, (-1, 28, 28, 1))

epochs = 1  # In practice you need at least 20 epochs to generate nice digits.
save_dir = "./"

for epoch in range(epochs):
    print(f"\nStart epoch {epoch}")

    for step, real_images in enumerate(batches(all_digits, batch_size=batch_size,
                                               shuffle=True)):
        # Train the discriminator & generator on one batch of real images.
        d_loss, g_loss, generated_images = train_step(real_images)

        # Logging.
        if step % 100 == 0:
            # Print metrics
            print(f"discriminator loss at step {step}: {float(d_loss):.2f}")
            print(f"adversarial loss at step {step}: {float(g_loss):.2f}")

            # Save one generated image
            img = keras.utils.array_to_img(generated_images[0] * 255.0, scale=False)
            img.save(os.path.join(save_dir, f"generated_img_{step}.png"))

        # To limit execution time we stop after 2 steps (adapted: 10 in the guide).
        if step > 2:
            break
