"""Demo street scenes: vehicles and people, the planning of both sides and the front of the
street, and :func:`render_scene`, which draws one image and its Cityscapes train-id labels.

See ``tools/dataset/make_demo_data.py`` for the design of the scenes.
"""
import functools

import cv2
import numpy as np

from .demo_scene_parts import (
    BUILDING,
    BUILDING_COLOURS,
    BUS,
    CAR,
    CAR_COLOURS,
    CLOTHES,
    IGNORE,
    PERSON,
    SKINS,
    TRUCK,
    _draw_building,
    _draw_gap,
    _draw_pole,
    _draw_tree,
    _front,
    _ground,
    _ground_disc,
    _lateral,
    _Light,
    _paint_ground,
    _paint_sky,
    _pick,
    _pixel_noise,
    _plan_street,
    _Scene,
    _smooth_noise,
)

__all__ = ['render_scene']

def _draw_vehicle(scene, rng, x, z, kind, light):
    w, h, length = {'car': (rng.uniform(1.65, 1.95), rng.uniform(1.35, 1.6), rng.uniform(3.9, 4.8)),
                    'truck': (2.4, rng.uniform(2.8, 3.6), rng.uniform(6, 9)),
                    'bus': (2.5, rng.uniform(2.9, 3.3), rng.uniform(10, 13))}[kind]
    label = {'car': CAR, 'truck': TRUCK, 'bus': BUS}[kind]
    colour = _pick(rng, CAR_COLOURS if kind == 'car' else CAR_COLOURS[4:], 15)
    glass = np.clip(_pick(rng, [(30, 35, 45), (90, 100, 115)], 15), 0, 255)
    tyre = _pick(rng, [(25, 25, 27)], 6)
    x0, x1 = x - w / 2, x + w / 2
    belt = h * (0.55 if kind == 'car' else 0.92)
    contact = _ground(x0 - 0.15, x1 + 0.15, z - 0.3, z + length)
    scene.darken(scene.project(contact), 0.45 + 0.2 * (1 - light.sun))
    sx = x0 if x0 > 0.3 else (x1 if x1 < -0.3 else None)  # the side facing the camera, if any
    if sx is not None:
        side_gain = 0.85
        body = _lateral(sx, 0.25, belt, z, z + length)
        scene.fill([scene.project(body)], colour * side_gain, label, 0.02, 0.05)
        if kind == 'car':
            cabin = [(sx, belt, z + 0.12 * length), (sx, h, z + 0.32 * length),
                     (sx, h, z + 0.72 * length), (sx, belt, z + 0.88 * length)]
            scene.fill([scene.project(cabin)], colour * side_gain, label)
            win = [(sx, belt + 0.06, z + 0.2 * length), (sx, h - 0.06, z + 0.35 * length),
                   (sx, h - 0.06, z + 0.7 * length), (sx, belt + 0.06, z + 0.8 * length)]
            scene.fill([scene.project(win)], glass, label, 0.02, 0.03)
        elif kind == 'bus':
            zw = np.arange(z + 0.5, z + length - 1.5, 1.6)
            scene.fill([scene.project(_lateral(sx, 1.3, h - 0.35, a, a + 1.4)) for a in zw],
                       glass, label)
        else:
            cab_window = _lateral(sx, belt * 0.45, belt - 0.2, z + length - 2.0, z + length - 0.4)
            scene.fill([scene.project(cab_window)], glass, label)
        r = 0.32 if kind == 'car' else 0.5
        ang = np.linspace(0, 2 * np.pi, 14, endpoint=False)
        wheels = [np.stack([np.full(14, sx), r + r * np.sin(ang), c + r * np.cos(ang)], -1)
                  for c in (z + 0.18 * length, z + 0.82 * length)]
        wheels = [scene.project(wheel) for wheel in wheels]
        scene.fill(wheels, tyre, label)
    if kind == 'car':
        if scene.cam_height > h:
            roof = _ground(x0 + 0.25, x1 - 0.25, z + 0.6, z + 0.7 * length, h)
            scene.fill([scene.project(roof)], colour, label)
        scene.fill([scene.project(_ground(x0, x1, z, z + 0.6, belt))], colour, label)
        cabin = [(x0 + 0.1, belt, z + 0.6), (x1 - 0.1, belt, z + 0.6), (x1 - 0.25, h, z + 0.6),
                 (x0 + 0.25, h, z + 0.6)]
        scene.fill([scene.project(cabin)], colour, label)
        win = [(x0 + 0.2, belt + 0.05, z + 0.59), (x1 - 0.2, belt + 0.05, z + 0.59),
               (x1 - 0.32, h - 0.07, z + 0.59), (x0 + 0.32, h - 0.07, z + 0.59)]
        scene.fill([scene.project(win)], glass, label, 0.02, 0.03)
    wheels = [scene.project(_front(a, a + 0.25, 0, 0.35, z + 0.3)) for a in (x0 + 0.05, x1 - 0.3)]
    scene.fill(wheels, tyre, label)
    scene.fill([scene.project(_front(x0, x1, 0.22, belt, z))], colour, label, 0.02, 0.05)
    if kind == 'bus':
        rear_window = _front(x0 + 0.15, x1 - 0.15, belt * 0.55, belt - 0.2, z - 0.01)
        scene.fill([scene.project(rear_window)], glass, label)
    lamp_y = belt - 0.28
    lamps = [scene.project(_front(a, a + 0.25, lamp_y, lamp_y + 0.15, z - 0.01))
             for a in (x0 + 0.05, x1 - 0.3)]
    scene.fill(lamps, _pick(rng, [(190, 25, 25)], 20), label)
    plate = _front(x - 0.26, x + 0.26, 0.4, 0.52, z - 0.01)
    scene.fill([scene.project(plate)], _pick(rng, [(225, 225, 220)], 10), label)


def _draw_person(scene, rng, x, z):
    h = rng.uniform(1.5, 1.9)
    trousers, shirt, skin = _pick(rng, CLOTHES), _pick(rng, CLOTHES), _pick(rng, SKINS, 10)
    stride = rng.uniform(-0.08, 0.08)
    legs = [scene.project(_front(x - 0.17 + stride, x - 0.03, 0, 0.48 * h, z)),
            scene.project(_front(x + 0.03, x + 0.17 - stride, 0, 0.48 * h, z))]
    scene.fill(legs, trousers, PERSON, 0.05, 0.08)
    arms = _front(x - 0.3, x + 0.3, 0.5 * h, 0.8 * h, z)
    scene.fill([scene.project(arms)], shirt * 0.9, PERSON)
    torso = [(x - 0.2, 0.45 * h, z), (x + 0.2, 0.45 * h, z), (x + 0.23, 0.82 * h, z),
             (x - 0.23, 0.82 * h, z)]
    scene.fill([scene.project(torso)], shirt, PERSON, 0.05, 0.08)
    scene.fill([scene.disc((x, 0.91 * h, z), 0.075 * h, 14)], skin, PERSON, 0.03, 0.05)
    hair = scene.project([(x - 0.075 * h, 0.92 * h, z), (x + 0.075 * h, 0.92 * h, z),
                          (x, 0.99 * h, z)])
    scene.fill([hair], _pick(rng, [(30, 25, 20), (110, 80, 50), (200, 180, 120)], 10), PERSON)
    if rng.random() < 0.25:
        bag = _front(x + 0.2, x + 0.42, 0.4 * h, 0.6 * h, z - 0.05)
        scene.fill([scene.project(bag)], _pick(rng, CLOTHES), PERSON)


def _plan_side(rng, scene, street, side, light, sky_colour, back, shadows):
    """Facades, gaps and their contents along one side as (depth, draw) back-layer items."""
    x_facade = street.facade(side)
    z = rng.uniform(-8, 4)
    while z < street.z_end:
        if rng.random() < 0.35:  # gap between buildings
            z1 = min(z + rng.uniform(4, 16), street.z_end)
            kind = ('hedge', 'wall', 'fence', 'open', 'open')[rng.integers(5)]
            back.append((z1, functools.partial(_draw_gap, scene, rng, side, x_facade, z, z1, kind)))
            for tz in np.arange(z + rng.uniform(1, 4), z1, rng.uniform(3, 7)):
                if tz > 2:
                    tx = x_facade + side * rng.uniform(1, 5)
                    back.append((tz + 0.5, functools.partial(_draw_tree, scene, rng, tx, tz)))
        else:
            z1 = min(z + rng.uniform(8, 35), street.z_end + 10)
            height = rng.uniform(5, 24) if rng.random() < 0.9 else rng.uniform(25, 45)
            x = x_facade + side * rng.uniform(0, 1.0)
            back.append((z1, functools.partial(_draw_building, scene, rng, side, x, z, z1, height,
                                               light, sky_colour)))
            if light.sun > 0.2 and side == light.sun_side:  # its shadow falls across the street
                reach = min(height * rng.uniform(0.3, 0.9), abs(x - street.facade(-side)))
                dz = height * rng.uniform(-0.4, 0.4)
                z_from = max(z + dz, street.z_near)
                z_to = max(z1 + dz, z_from + 0.1)
                shadows.append(_ground(*sorted((x, x - side * reach)), z_from, z_to))
        z = z1


def _plan_front(rng, scene, street, light, front, shadows):
    """Poles, street trees, vehicles and people, as (depth, draw) items for the front layer."""
    for side in (-1, 1):
        kerb, (w_in, w_out) = street.kerb(side), street.walk[side]
        for z in np.arange(rng.uniform(3, 15), min(street.z_end, 120), rng.uniform(12, 35)):
            kind = ('light', 'light', 'sign', 'signal')[rng.integers(4)]
            x = w_in + side * 0.5
            front.append((z, functools.partial(_draw_pole, scene, rng, side, x, z, kind)))
        if rng.random() < 0.35:
            for z in np.arange(rng.uniform(4, 12), min(street.z_end, 90), rng.uniform(9, 18)):
                front.append((z, functools.partial(_draw_tree, scene, rng, w_in + side, z, 0.8)))
                if light.sun > 0.2:  # crown shadow, kept in front of the camera (Z > 0)
                    radius = rng.uniform(1.5, 3)
                    zc = max(z + rng.uniform(-1, 1), street.z_near + radius)
                    shadows.append(_ground_disc(w_in + side, zc, radius))
        if rng.random() < 0.6:  # parked cars along the kerb
            z = rng.uniform(2, 10)
            while z < min(street.z_end, 70):
                if rng.random() < 0.75:
                    x = kerb - side * 1.1
                    draw = functools.partial(_draw_vehicle, scene, rng, x, z, 'car', light)
                    front.append((z, draw))
                z += rng.uniform(5, 9)
        for _ in range(rng.poisson(3 if rng.random() < 0.8 else 10)):
            x, z = rng.uniform(min(w_in, w_out) + 0.3, max(w_in, w_out) - 0.3), rng.uniform(3, 45)
            front.append((z, functools.partial(_draw_person, scene, rng, x, z)))
    left, right = street.road
    lanes = max(1, int(round((right - left) / 3.3)))
    taken = []
    for _ in range(rng.poisson(2.5)):
        lane = rng.integers(lanes)
        x, z = left + (lane + 0.5) * (right - left) / lanes, rng.uniform(5, 70)
        if any(used == lane and abs(z - t) < 14 for used, t in taken):
            continue
        taken.append((lane, z))
        kind = 'car' if rng.random() < 0.82 else ('bus', 'truck')[rng.integers(2)]
        front.append((z, functools.partial(_draw_vehicle, scene, rng, x, z, kind, light)))


def _finish(scene, rng, sky_colour):
    """Textures, illumination, haze, optics and sensor noise on the painted radiance."""
    h, w = scene.h, scene.w
    fine = _pixel_noise(rng, (h, w, 1)) + 0.3 * _pixel_noise(rng, (h, w, 3))
    img = scene.image * np.clip(1 + scene.grain[..., None] * fine, 0.3, 2)
    # One gain map: texture blobs, uneven illumination, vignetting and exposure.
    gain = np.clip(1 + scene.mottle * _smooth_noise(rng, h, w, max(2.0, w / 80)), 0.3, 2)
    gain *= 1 + 0.12 * _smooth_noise(rng, h, w, w / 3)
    r2 = (np.linspace(-1, 1, h, dtype=np.float32)[:, None] ** 2
          + np.linspace(-1, 1, w, dtype=np.float32)[None] ** 2)
    gain *= np.float32(rng.uniform(0.65, 1.3)) * (1 - np.float32(rng.uniform(0, 0.125)) * r2)
    img *= gain[..., None]
    img *= rng.uniform(0.87, 1.13, 3).astype(np.float32)  # colour cast
    rows = np.abs(np.arange(h, dtype=np.float32) - scene.horizon) / np.float32(0.12 * h)
    haze = (np.float32(rng.uniform(0, 0.4)) * np.exp(-rows))[:, None, None]  # thickest at horizon
    img = img * (1 - haze) + sky_colour * haze
    img = cv2.GaussianBlur(img, (0, 0), rng.uniform(0.4, 0.9))
    gamma = rng.uniform(0.8, 1.25)
    img = cv2.pow(np.clip(img, 0, 255) * np.float32(1 / 255), gamma) * np.float32(255)
    img += np.float32(rng.uniform(1.5, 5)) * _pixel_noise(rng, img.shape)  # sensor noise
    return np.clip(np.round(img), 0, 255).astype(np.uint8)


def render_scene(rng, height, width):
    """Draw one street scene.

    Args:
        rng (numpy.random.Generator): the only source of randomness.
        height (int): image height in pixels.
        width (int): image width in pixels.

    Returns:
        tuple[np.ndarray, np.ndarray]: RGB image (H, W, 3) uint8 and train-id labels (H, W) uint8.
    """
    scene = _Scene(height, width, focal=width * rng.uniform(0.55, 0.8),
                   cx=width * rng.uniform(0.38, 0.62), horizon=height * rng.uniform(0.36, 0.5),
                   cam_height=rng.uniform(1.2, 1.8))
    light = _Light(sun=float(rng.uniform(0, 1) if rng.random() < 0.7 else 0.0),
                   sun_side=int(rng.choice([-1, 1])))
    sky_colour = _paint_sky(scene, rng)
    street = _plan_street(rng, scene)
    back, front, shadows = [], [], []
    for side in (-1, 1):
        _plan_side(rng, scene, street, side, light, sky_colour, back, shadows)
    _plan_front(rng, scene, street, light, front, shadows)
    _paint_ground(scene, rng, street)
    for quad in shadows:
        scene.darken(scene.project(quad), 1 - 0.5 * light.sun)
    if street.backdrop:  # a row of distant buildings closing the street, faded by haze
        x = -150.0
        while x < 150:
            x1 = x + rng.uniform(8, 30)
            colour = _pick(rng, BUILDING_COLOURS) * 0.6 + sky_colour * 0.4
            face = _front(x, x1, 0, rng.uniform(8, 45), street.z_end + rng.uniform(0, 8))
            scene.fill([scene.project(face)], colour, BUILDING, 0.03, 0.1)
            x = x1
    for _, draw in sorted(back, key=lambda item: -item[0]):  # far to near
        draw()
    for _, draw in sorted(front, key=lambda item: -item[0]):
        draw()
    if rng.random() < 0.35:  # ego-vehicle hood: ignored, as in Cityscapes
        xs = np.linspace(0, width, 24)
        bulge = height * 0.05 * ((xs - width / 2) / (width / 2)) ** 2
        top = height * (1 - rng.uniform(0.06, 0.12)) + bulge
        hood = np.round(np.concatenate([np.stack([xs, top], -1), [[width, height], [0, height]]]))
        scene.fill([hood.astype(np.int32)], _pick(rng, CAR_COLOURS, 10) * 0.7, IGNORE, 0.02, 0.2)
    return _finish(scene, rng, sky_colour), scene.labels
