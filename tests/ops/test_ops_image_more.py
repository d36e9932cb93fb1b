"""Issue 44, keras.ops.image: the new kiln.ops.image names against Keras 3 (eager and compiled
graph), finite-difference gradients, and the errors."""

from __future__ import annotations

import numpy as np
import pytest
from more_oracle import check_grad, check_keras, keras_ops

import kiln.ops as K

rng = np.random.default_rng(7)
RGB = rng.uniform(size=(2, 5, 6, 3)).astype("float32")
RGB[0, 0, 0] = [0.5, 0.5, 0.5]  # grey: zero range
RGB[0, 0, 1] = [0.0, 0.0, 0.0]  # black: zero value
IMG = rng.normal(size=(2, 9, 8, 2)).astype("float32")
VOL = rng.normal(size=(1, 5, 6, 4, 2)).astype("float32")
GRID = rng.normal(size=(5, 6)).astype("float32")
# coordinates off the half-integers (order 0 rounds; scipy and NumPy may break ties apart)
COORDS = (rng.uniform(-2.3, 7.3, size=(2, 4, 3)) + 0.01).astype("float32")
COORDS = np.where(np.abs(COORDS - np.round(COORDS)) > 0.45, COORDS + 0.1, COORDS)


def _case(fn, kname, *arrays, **kw):
    return (lambda *a: fn(*a, **kw), lambda ko: lambda *a: getattr(ko.image, kname)(*a, **kw),
            list(arrays))


CASES = {
    "rgb_to_grayscale": _case(K.image.rgb_to_grayscale, "rgb_to_grayscale", RGB),
    "rgb_to_grayscale_nchw": _case(K.image.rgb_to_grayscale, "rgb_to_grayscale",
                                   RGB.transpose(0, 3, 1, 2).copy(),
                                   data_format="channels_first"),
    "rgb_to_hsv": _case(K.image.rgb_to_hsv, "rgb_to_hsv", RGB),
    "hsv_to_rgb": _case(K.image.hsv_to_rgb, "hsv_to_rgb", RGB),
    "hsv_to_rgb_single": _case(K.image.hsv_to_rgb, "hsv_to_rgb", RGB[0]),
    "gaussian_blur": _case(K.image.gaussian_blur, "gaussian_blur", IMG, kernel_size=(3, 5),
                           sigma=(1.0, 2.0)),
    "gaussian_blur_nchw": _case(K.image.gaussian_blur, "gaussian_blur",
                                IMG.transpose(0, 3, 1, 2).copy(), kernel_size=(4, 4),
                                sigma=(1.5, 1.5), data_format="channels_first"),
    "sobel_edges": _case(K.image.sobel_edges, "sobel_edges", IMG),
    "ssim": _case(K.image.ssim, "ssim", RGB, np.clip(RGB + 0.1 * rng.normal(
        size=RGB.shape), 0, 1).astype("float32"), filter_size=3),
    "crop_images": _case(K.image.crop_images, "crop_images", IMG, top_cropping=2,
                         bottom_cropping=1, left_cropping=1, target_width=5),
    "crop_images_nchw": _case(K.image.crop_images, "crop_images", IMG.transpose(0, 3, 1, 2),
                              target_height=4, bottom_cropping=3, left_cropping=2,
                              right_cropping=3, data_format="channels_first"),
    "pad_images": _case(K.image.pad_images, "pad_images", IMG[0], top_padding=1,
                        target_height=12, left_padding=0, right_padding=2),
    "extract_patches": _case(K.image.extract_patches, "extract_patches", IMG, size=(3, 2)),
    "extract_patches_same": _case(K.image.extract_patches, "extract_patches", IMG, size=3,
                                  strides=2, padding="same"),
    "extract_patches_dilated": _case(K.image.extract_patches, "extract_patches", IMG, size=2,
                                     strides=1, dilation_rate=2),
    "extract_patches_3d": _case(K.image.extract_patches_3d, "extract_patches_3d", VOL,
                                size=(2, 3, 2)),
    "extract_patches_3d_same": _case(K.image.extract_patches_3d, "extract_patches_3d", VOL,
                                     size=2, strides=(1, 2, 3), padding="same"),
}
for _mode in ("constant", "nearest", "wrap", "mirror", "reflect"):
    for _order in (0, 1):
        CASES[f"map_coordinates_{_mode}_{_order}"] = _case(
            K.image.map_coordinates, "map_coordinates", GRID, COORDS, order=_order,
            fill_mode=_mode, fill_value=-1.5)


@pytest.mark.parametrize("name", sorted(CASES))
def test_matches_keras(name):
    ko = keras_ops()
    fn, kfn, arrays = CASES[name]
    check_keras(fn, kfn(ko), *arrays, rtol=1e-4, atol=2e-5)


GRADS = {
    "rgb_to_grayscale": (K.image.rgb_to_grayscale, [RGB[:1]]),
    "hsv_to_rgb": (K.image.hsv_to_rgb, [RGB[1:]]),
    "gaussian_blur": (lambda x: K.image.gaussian_blur(x, (3, 3), (1.0, 0.7)), [IMG[:1]]),
    "sobel_edges": (K.image.sobel_edges, [IMG[:1]]),
    "ssim": (lambda a, b: K.image.ssim(a, b, filter_size=3), [RGB[:1], RGB[1:]]),
    "extract_patches": (lambda x: K.image.extract_patches(x, 2), [IMG[:1]]),
    "map_coordinates_values": (lambda g, c: K.image.map_coordinates(g, c, 1, "mirror"),
                               [GRID, COORDS]),
    "map_coordinates_coords": (lambda c, g: K.image.map_coordinates(g, c, 1, "nearest"),
                               [COORDS, GRID]),
}


@pytest.mark.parametrize("name", sorted(GRADS))
def test_gradient_matches_finite_differences(name):
    fn, arrays = GRADS[name]
    check_grad(fn, *arrays, rtol=2e-4, atol=1e-6)


def test_hsv_round_trip():
    np.testing.assert_allclose(K.image.hsv_to_rgb(K.image.rgb_to_hsv(RGB)), RGB, atol=1e-5)


def test_errors():
    with pytest.raises(ValueError, match="crop_images: must specify exactly two of"):
        K.image.crop_images(IMG, top_cropping=1)
    with pytest.raises(ValueError, match=r"rgb_to_hsv: expected float images, received dtype"):
        K.image.rgb_to_hsv(np.zeros((2, 2, 3), "int32"))
    with pytest.raises(ValueError, match=r"map_coordinates: order must be 0 or 1"):
        K.image.map_coordinates(GRID, COORDS, 3)
    with pytest.raises(ValueError, match=r"rgb_to_grayscale: expected images of rank 3"):
        K.image.rgb_to_grayscale(np.zeros((3, 3), "float32"))
