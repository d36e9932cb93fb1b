"""PixelCNN (Keras 3 version).

Source: https://keras.io/examples/generative/pixelcnn/
(keras-team/keras-io, examples/generative/pixelcnn.py, the Keras 3 version: ``import keras``,
``from keras import ops``, ``ops.shape(self.conv.kernel)``, ``keras.utils.save_img``).

Adaptations:
- imports: ``import keras`` -> ``import kiln as keras``, ``from keras import layers`` / ``ops``
  -> ``from kiln import layers`` / ``ops``;
- data: 512 random binary 28x28 "digits" (blobs of ones) instead of MNIST's 70,000
  (``keras.datasets.mnist.load_data()``), thresholded as in the original;
- sizes: 2 residual blocks instead of 5, 32 filters instead of 128; epochs 1 instead of 50;
- generation: 2 images, the first 2 rows only (the original: 4 images, all 28x28 pixels, one
  ``predict`` per pixel); ``IPython.display`` dropped; a final ``print`` of the training loss
  and of the fraction of generated ones.
"""

# ruff: noqa: I001, UP031, UP032, F811, E712, E402  (kept as in the original text)

import numpy as np
import kiln as keras
from kiln import layers
from kiln import ops
from tqdm import tqdm

"""
## Getting the Data
"""

# Model / data parameters
num_classes = 10
input_shape = (28, 28, 1)
n_residual_blocks = 2  # (adapted: 5)
# (adapted: random blobs instead of keras.datasets.mnist.load_data())
_rng = np.random.default_rng(0)
_yy, _xx = np.mgrid[:28, :28]
_c = _rng.uniform(8, 20, size=(512, 2))
_r = _rng.uniform(4, 9, size=(512, 1, 1))
x = (((_yy[None] - _c[:, 0, None, None]) ** 2 + (_xx[None] - _c[:, 1, None, None]) ** 2)
     < _r**2) * 255
x, y = x[:448], x[448:]
# Concatenate all the images together
data = np.concatenate((x, y), axis=0)
# Round all pixel values less than 33% of the max 256 value to 0
# anything above this value gets rounded up to 1 so that all values are either
# 0 or 1
data = np.where(data < (0.33 * 256), 0, 1)
data = data.astype(np.float32)

"""
## Create two classes for the requisite Layers for the model
"""


# The first layer is the PixelCNN layer. This layer simply
# builds on the 2D convolutional layer, but includes masking.
class PixelConvLayer(layers.Layer):
    def __init__(self, mask_type, **kwargs):
        super().__init__()
        self.mask_type = mask_type
        self.conv = layers.Conv2D(**kwargs)

    def build(self, input_shape):
        # Build the conv2d layer to initialize kernel variables
        self.conv.build(input_shape)
        # Use the initialized kernel to create the mask
        kernel_shape = ops.shape(self.conv.kernel)
        self.mask = np.zeros(shape=kernel_shape)
        self.mask[: kernel_shape[0] // 2, ...] = 1.0
        self.mask[kernel_shape[0] // 2, : kernel_shape[1] // 2, ...] = 1.0
        if self.mask_type == "B":
            self.mask[kernel_shape[0] // 2, kernel_shape[1] // 2, ...] = 1.0

    def call(self, inputs):
        self.conv.kernel.assign(self.conv.kernel * self.mask)
        return self.conv(inputs)


# Next, we build our residual block layer.
# This is just a normal residual block, but based on the PixelConvLayer.
class ResidualBlock(keras.layers.Layer):
    def __init__(self, filters, **kwargs):
        super().__init__(**kwargs)
        self.conv1 = keras.layers.Conv2D(
            filters=filters, kernel_size=1, activation="relu"
        )
        self.pixel_conv = PixelConvLayer(
            mask_type="B",
            filters=filters // 2,
            kernel_size=3,
            activation="relu",
            padding="same",
        )
        self.conv2 = keras.layers.Conv2D(
            filters=filters, kernel_size=1, activation="relu"
        )

    def call(self, inputs):
        x = self.conv1(inputs)
        x = self.pixel_conv(x)
        x = self.conv2(x)
        return keras.layers.add([inputs, x])


"""
## Build the model based on the original paper
"""

inputs = keras.Input(shape=input_shape)
x = PixelConvLayer(
    mask_type="A", filters=32, kernel_size=7, activation="relu", padding="same"
)(inputs)

for _ in range(n_residual_blocks):
    x = ResidualBlock(filters=32)(x)

for _ in range(2):
    x = PixelConvLayer(
        mask_type="B",
        filters=32,
        kernel_size=1,
        strides=1,
        activation="relu",
        padding="valid",
    )(x)

out = keras.layers.Conv2D(
    filters=1, kernel_size=1, strides=1, activation="sigmoid", padding="valid"
)(x)

pixel_cnn = keras.Model(inputs, out)
adam = keras.optimizers.Adam(learning_rate=0.0005)
pixel_cnn.compile(optimizer=adam, loss="binary_crossentropy")

pixel_cnn.summary()
history = pixel_cnn.fit(
    x=data, y=data, batch_size=128, epochs=1, validation_split=0.1, verbose=2
)

"""
## Demonstration
"""

# Create an empty array of pixels.
batch = 2  # (adapted: 4)
pixels = np.zeros(shape=(batch,) + (pixel_cnn.input_shape)[1:])
batch, rows, cols, channels = pixels.shape

# Iterate over the pixels because generation has to be done sequentially pixel by pixel.
for row in tqdm(range(2)):  # (adapted: range(rows))
    for col in range(cols):
        for channel in range(channels):
            # Feed the whole array and retrieving the pixel value probabilities for the next
            # pixel.
            probs = pixel_cnn.predict(pixels, verbose=0)[:, row, col, channel]
            # Use the probabilities to pick pixel values and append the values to the image
            # frame.
            pixels[:, row, col, channel] = ops.ceil(
                probs - keras.random.uniform(probs.shape)
            )


def deprocess_image(x):
    # Stack the single channeled black and white image to rgb values.
    x = np.stack((x, x, x), 2)
    # Undo preprocessing
    x *= 255.0
    # Convert to uint8 and clip to the valid range [0, 255]
    x = np.clip(x, 0, 255).astype("uint8")
    return x


# Iterate over the generated images and plot them with matplotlib.
for i, pic in enumerate(pixels):
    keras.utils.save_img(
        "generated_image_{}.png".format(i), deprocess_image(np.squeeze(pic, -1))
    )

# (adapted: a final print instead of IPython.display)
print("final loss: %.4f" % history.history["loss"][-1])
print("fraction of generated ones: %.3f" % pixels[:, :2].mean())
