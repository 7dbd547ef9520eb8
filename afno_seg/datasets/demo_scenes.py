"""The demo street scenes: :func:`render_scene` draws one image and its Cityscapes train-id labels.

What they look like and why: ``tools/dataset/make_demo_data.py``. Classes, the ground and sky,
noise, the camera and canvas are in :mod:`.demo_scene_parts`; below, the objects and their
colours, the planning of a street and the drawing.
"""
from dataclasses import dataclass

import cv2
import numpy as np

from .demo_scene_parts import (
    BUILDING,
    CLASSES,
    FENCE,
    GREYS,
    IGNORE,
    LIGHT,
    PERSON,
    POLE,
    SIGN,
    VEGETATION,
    WALL,
    _front,
    _ground,
    _ground_disc,
    _lateral,
    _paint_ground,
    _paint_sky,
    _pick,
    _pixel_noise,
    _plan_street,
    _Scene,
    _smooth_noise,
)

__all__ = ['render_scene']

SIDE_Z_MIN = 1.0  # metres; roadside objects nearer than this are outside the frame anyway

# Object colours (RGB), greys included on purpose (as on the ground).
BUILDING_COLOURS = GREYS + [(200, 188, 165), (150, 82, 62), (222, 220, 212), (178, 148, 108),
                            (105, 118, 132), (92, 86, 80)]
CAR_COLOURS = GREYS + [(30, 30, 34), (228, 228, 226), (160, 30, 30), (35, 60, 130), (40, 80, 55),
                       (190, 190, 198), (200, 160, 40)]
CLOTHES = GREYS + [(30, 30, 35), (40, 55, 95), (150, 40, 40), (225, 225, 220), (60, 90, 60),
                   (130, 100, 70), (200, 170, 60)]
SKINS = [(225, 190, 160), (190, 145, 110), (140, 100, 70), (90, 62, 45)]
GREENS = [(60, 100, 45), (85, 120, 50), (40, 70, 40), (110, 125, 60), (125, 110, 55)]


@dataclass
class _Light:
    """Per-image illumination: sun strength (0 = overcast) and the side the sun shines from."""
    sun: float
    sun_side: int

    def facade_gain(self, side):
        lit = -side == self.sun_side  # a facade on side s faces -s
        return 1 + 0.15 * self.sun if lit else 1 - 0.4 * self.sun


def _draw_building(scene, rng, side, x, z0, z1, height, light, sky_colour):
    colour = _pick(rng, BUILDING_COLOURS) * rng.uniform(0.8, 1.15)
    if z0 > SIDE_Z_MIN:  # the wall facing the camera where the previous building ends
        face = _front(*sorted((x, x + side * 15.0)), 0, height, z0)
        scene.paint([face], colour * (1 - 0.25 * light.sun), BUILDING, 0.04, 0.08)
    zs = max(z0, SIDE_Z_MIN)
    gain = light.facade_gain(side)
    scene.paint([_lateral(x, 0, height, zs, z1)], colour * gain, BUILDING, 0.04, 0.08)
    floor_h, spacing = rng.uniform(2.8, 3.6), rng.uniform(2.2, 4.0)
    win_w, win_h = spacing * rng.uniform(0.35, 0.7), floor_h * rng.uniform(0.4, 0.65)
    if rng.random() < 0.3:  # cornice bands between floors
        bands = [_lateral(x, y, y + 0.25, zs, z1)
                 for y in np.arange(floor_h, height - 0.5, floor_h)]
        scene.paint(bands, colour * gain * rng.uniform(0.75, 1.2))
    first = 0
    if rng.random() < 0.5:  # shop front: a glass band on the ground floor
        scene.paint([_lateral(x, 0.4, floor_h * 0.8, zs, z1)],
                   _pick(rng, [(40, 45, 55), tuple(sky_colour * 0.6)], 20), BUILDING, 0.02, 0.05)
        first = 1
    if rng.random() < 0.1:
        return  # blank wall
    ys = np.arange(first, int((height - 0.6) // floor_h)) * floor_h + (floor_h - win_h) / 2
    zc = np.arange(z0 + spacing / 2, z1 - spacing / 2, spacing)
    zc = zc[zc - win_w / 2 > SIDE_Z_MIN]
    if len(ys) == 0 or len(zc) == 0:
        return
    yy, zz = np.meshgrid(ys, zc, indexing='ij')
    yy, zz = yy.ravel(), zz.ravel()
    corners = ((0, -win_w / 2), (0, win_w / 2), (win_h, win_w / 2), (win_h, -win_w / 2))
    quads = np.stack([np.stack([np.full_like(yy, x), yy + dy, zz + dz], -1)
                      for dy, dz in corners], 1)
    pix = scene.project(quads)
    group = rng.integers(0, 3, len(pix))  # dark glass, sky reflection, lit or curtained
    glass = [_pick(rng, [(35, 42, 55)], 12), np.clip(sky_colour * rng.uniform(0.55, 0.9), 0, 255),
             _pick(rng, [(200, 180, 140), (150, 150, 150)], 20)]
    for g in range(3):
        scene.fill(list(pix[group == g]), glass[g] * gain, None, 0.02, 0.04)


def _draw_tree(scene, rng, x, z, size=1.0):
    trunk_h, crown_r = rng.uniform(1.8, 3.5) * size, rng.uniform(1.5, 3.5) * size
    trunk = _pick(rng, [(80, 65, 50), (100, 100, 95)], 15)
    stem = _front(x - 0.15 * size, x + 0.15 * size, 0, trunk_h + crown_r * 0.5, z)
    scene.paint([stem], trunk, VEGETATION, 0.1, 0.2)
    green = _pick(rng, GREENS, 15)
    cy = trunk_h + crown_r * 0.8
    ang = np.linspace(0, 2 * np.pi, 32, endpoint=False)
    wobble = 1 + sum(rng.uniform(0.03, 0.1) * np.sin(k * ang + rng.uniform(0, 6.3))
                     for k in (3, 5, 8))
    scene.fill([scene.disc((x, cy, z), crown_r, 32, wobble)], green, VEGETATION, 0.22, 0.4)
    for _ in range(rng.integers(4, 10)):  # leaf clumps in light and shade
        r = crown_r * rng.uniform(0.2, 0.45)
        cx, cyy = x + rng.uniform(-0.5, 0.5) * crown_r, cy + rng.uniform(-0.5, 0.5) * crown_r
        clump = scene.disc((cx, cyy, z - 0.01), r, 14)
        scene.fill([clump], green * rng.uniform(0.6, 1.35), VEGETATION)


def _draw_gap(scene, rng, x, z0, z1, kind):
    zs = max(z0, SIDE_Z_MIN)
    if zs >= z1:
        return
    if kind == 'hedge':
        zz = np.arange(zs, z1, 0.5)
        top = rng.uniform(0.8, 2.0) + 0.12 * rng.standard_normal(len(zz))
        pts = [(x, 0, zs)] + [(x, t, z) for t, z in zip(top, zz)] + [(x, top[-1], z1), (x, 0, z1)]
        scene.paint([pts], _pick(rng, GREENS), VEGETATION, 0.25, 0.4)
    elif kind == 'wall':
        colour = _pick(rng, BUILDING_COLOURS)
        h = rng.uniform(0.8, 2.5)
        scene.paint([_lateral(x, 0, h, zs, z1)], colour, WALL, 0.06, 0.15)
        scene.paint([_lateral(x, h - 0.15, h, zs, z1)], colour * 1.15, WALL)
    elif kind == 'fence':
        colour = _pick(rng, [(60, 75, 60), (110, 110, 110), (50, 50, 52)], 12)
        h = rng.uniform(1.0, 2.0)
        bars = [scene.project(_lateral(x, y, y + 0.07, zs, z1)) for y in (0.3, h - 0.1)]
        scene.fill(bars, colour, FENCE, 0.05, 0.05)
        posts = [scene.project(_front(x - 0.04, x + 0.04, 0, h, z))
                 for z in np.arange(z1, zs, -rng.uniform(0.25, 2.0))]
        scene.fill(posts, colour, FENCE, 0.05, 0.05)


def _draw_pole(scene, rng, side, x, z, kind):
    colour = _pick(rng, GREYS + [(55, 65, 55), (40, 40, 42)], 10)
    w = rng.uniform(0.1, 0.22)
    h = rng.uniform(*{'light': (6, 9), 'sign': (2.4, 3.4), 'signal': (3.2, 4.5)}[kind])
    scene.paint([_front(x - w / 2, x + w / 2, 0, h, z)], colour, POLE, 0.04, 0.05)
    if kind == 'light':  # arm reaching over the road with a lamp head
        tip = x - side * rng.uniform(1.0, 2.5)
        scene.paint([_front(*sorted((x, tip)), h - 0.12, h, z)], colour, POLE)
        scene.paint([_front(*sorted((tip, tip - side * 0.6)), h - 0.25, h, z)], colour * 1.2, POLE)
    elif kind == 'sign':
        s, cy = rng.uniform(0.55, 0.85), h - 0.35
        shape = rng.integers(3)
        outer = _pick(rng, [(200, 30, 30), (30, 70, 170), (230, 230, 225), (225, 190, 40)], 15)
        if shape == 0:
            poly = scene.disc((x, cy, z - 0.01), s / 2, 24)
        elif shape == 1:
            poly = scene.project([(x - s / 2, cy - s / 2.5, z), (x + s / 2, cy - s / 2.5, z),
                                  (x, cy + s / 2, z)])
        else:
            poly = scene.project(_front(x - s / 2, x + s / 2, cy - s / 3, cy + s / 3, z - 0.01))
        scene.fill([poly], outer, SIGN, 0.03, 0.05)
        if shape == 0:
            inner = _pick(rng, [(235, 235, 232), (40, 90, 190)])
            scene.fill([scene.disc((x, cy, z - 0.02), s / 3, 24)], inner, SIGN)
    else:  # traffic signal: housing with three lamps, one lit
        bx = x - side * 0.2
        housing = _pick(rng, [(30, 32, 30), (70, 80, 50), (120, 120, 118)], 10)
        box = _front(bx - 0.17, bx + 0.17, h - 1.0, h, z - 0.05)
        scene.paint([box], housing, LIGHT, 0.03, 0.05)
        on = rng.integers(3)
        for i, lit in enumerate([(255, 40, 30), (255, 190, 40), (60, 230, 120)]):
            c = np.float32(lit) if i == on else housing * 0.5 + 20
            scene.fill([scene.disc((bx, h - 0.2 - 0.3 * i, z - 0.06), 0.1, 12)], c, LIGHT)


def _draw_vehicle(scene, rng, x, z, kind, light):
    w, h, length = {'car': (rng.uniform(1.65, 1.95), rng.uniform(1.35, 1.6), rng.uniform(3.9, 4.8)),
                    'truck': (2.4, rng.uniform(2.8, 3.6), rng.uniform(6, 9)),
                    'bus': (2.5, rng.uniform(2.9, 3.3), rng.uniform(10, 13))}[kind]
    label = CLASSES.index(kind)
    colour = _pick(rng, CAR_COLOURS if kind == 'car' else CAR_COLOURS[4:], 15)
    glass = np.clip(_pick(rng, [(30, 35, 45), (90, 100, 115)], 15), 0, 255)
    tyre = _pick(rng, [(25, 25, 27)], 6)
    x0, x1 = x - w / 2, x + w / 2
    belt = h * (0.55 if kind == 'car' else 0.92)
    contact = _ground(x0 - 0.15, x1 + 0.15, z - 0.3, z + length)
    scene.darken(scene.project(contact), 0.45 + 0.2 * (1 - light.sun))
    sx = x0 if x0 > 0.3 else (x1 if x1 < -0.3 else None)  # the side facing the camera, if any
    if sx is not None:
        scene.paint([_lateral(sx, 0.25, belt, z, z + length)], colour * 0.85, label, 0.02, 0.05)
        if kind == 'car':
            cabin = [(sx, belt, z + 0.12 * length), (sx, h, z + 0.32 * length),
                     (sx, h, z + 0.72 * length), (sx, belt, z + 0.88 * length)]
            scene.paint([cabin], colour * 0.85, label)
            win = [(sx, belt + 0.06, z + 0.2 * length), (sx, h - 0.06, z + 0.35 * length),
                   (sx, h - 0.06, z + 0.7 * length), (sx, belt + 0.06, z + 0.8 * length)]
            scene.paint([win], glass, label, 0.02, 0.03)
        elif kind == 'bus':
            zw = np.arange(z + 0.5, z + length - 1.5, 1.6)
            scene.paint([_lateral(sx, 1.3, h - 0.35, a, a + 1.4) for a in zw], glass, label)
        else:
            cab_window = _lateral(sx, belt * 0.45, belt - 0.2, z + length - 2.0, z + length - 0.4)
            scene.paint([cab_window], glass, label)
        r = 0.32 if kind == 'car' else 0.5
        ang = np.linspace(0, 2 * np.pi, 14, endpoint=False)
        scene.paint([np.stack([np.full(14, sx), r + r * np.sin(ang), c + r * np.cos(ang)], -1)
                     for c in (z + 0.18 * length, z + 0.82 * length)], tyre, label)
    if kind == 'car':
        if scene.cam_height > h:
            roof = _ground(x0 + 0.25, x1 - 0.25, z + 0.6, z + 0.7 * length, h)
            scene.paint([roof], colour, label)
        scene.paint([_ground(x0, x1, z, z + 0.6, belt)], colour, label)
        cabin = [(x0 + 0.1, belt, z + 0.6), (x1 - 0.1, belt, z + 0.6), (x1 - 0.25, h, z + 0.6),
                 (x0 + 0.25, h, z + 0.6)]
        scene.paint([cabin], colour, label)
        win = [(x0 + 0.2, belt + 0.05, z + 0.59), (x1 - 0.2, belt + 0.05, z + 0.59),
               (x1 - 0.32, h - 0.07, z + 0.59), (x0 + 0.32, h - 0.07, z + 0.59)]
        scene.paint([win], glass, label, 0.02, 0.03)
    scene.paint([_front(a, a + 0.25, 0, 0.35, z + 0.3) for a in (x0 + 0.05, x1 - 0.3)], tyre, label)
    scene.paint([_front(x0, x1, 0.22, belt, z)], colour, label, 0.02, 0.05)
    if kind == 'bus':
        scene.paint([_front(x0 + 0.15, x1 - 0.15, belt * 0.55, belt - 0.2, z - 0.01)], glass, label)
    lamp_y = belt - 0.28
    lamps = [_front(a, a + 0.25, lamp_y, lamp_y + 0.15, z - 0.01) for a in (x0 + 0.05, x1 - 0.3)]
    scene.paint(lamps, _pick(rng, [(190, 25, 25)], 20), label)
    plate = _front(x - 0.26, x + 0.26, 0.4, 0.52, z - 0.01)
    scene.paint([plate], _pick(rng, [(225, 225, 220)], 10), label)


def _draw_person(scene, rng, x, z):
    h = rng.uniform(1.5, 1.9)
    trousers, shirt, skin = _pick(rng, CLOTHES), _pick(rng, CLOTHES), _pick(rng, SKINS, 10)
    stride = rng.uniform(-0.08, 0.08)
    legs = [scene.project(_front(x - 0.17 + stride, x - 0.03, 0, 0.48 * h, z)),
            scene.project(_front(x + 0.03, x + 0.17 - stride, 0, 0.48 * h, z))]
    scene.fill(legs, trousers, PERSON, 0.05, 0.08)
    scene.paint([_front(x - 0.3, x + 0.3, 0.5 * h, 0.8 * h, z)], shirt * 0.9, PERSON)
    torso = [(x - 0.2, 0.45 * h, z), (x + 0.2, 0.45 * h, z), (x + 0.23, 0.82 * h, z),
             (x - 0.23, 0.82 * h, z)]
    scene.paint([torso], shirt, PERSON, 0.05, 0.08)
    scene.fill([scene.disc((x, 0.91 * h, z), 0.075 * h, 14)], skin, PERSON, 0.03, 0.05)
    hair = [(x - 0.075 * h, 0.92 * h, z), (x + 0.075 * h, 0.92 * h, z), (x, 0.99 * h, z)]
    scene.paint([hair], _pick(rng, [(30, 25, 20), (110, 80, 50), (200, 180, 120)], 10), PERSON)
    if rng.random() < 0.25:
        bag = _front(x + 0.2, x + 0.42, 0.4 * h, 0.6 * h, z - 0.05)
        scene.paint([bag], _pick(rng, CLOTHES), PERSON)


def _plan_side(rng, street, side, light, sky_colour, back, shadows):
    """Facades, gaps and their contents along one side as (depth, draw, args) back-layer items."""
    x_facade = street.facade(side)
    z = rng.uniform(-8, 4)
    while z < street.z_end:
        if rng.random() < 0.35:  # gap between buildings
            z1 = min(z + rng.uniform(4, 16), street.z_end)
            kind = ('hedge', 'wall', 'fence', 'open', 'open')[rng.integers(5)]
            back.append((z1, _draw_gap, (x_facade, z, z1, kind)))
            for tz in np.arange(z + rng.uniform(1, 4), z1, rng.uniform(3, 7)):
                if tz > 2:
                    tx = x_facade + side * rng.uniform(1, 5)
                    back.append((tz + 0.5, _draw_tree, (tx, tz)))
        else:
            z1 = min(z + rng.uniform(8, 35), street.z_end + 10)
            height = rng.uniform(5, 24) if rng.random() < 0.9 else rng.uniform(25, 45)
            x = x_facade + side * rng.uniform(0, 1.0)
            back.append((z1, _draw_building, (side, x, z, z1, height, light, sky_colour)))
            if light.sun > 0.2 and side == light.sun_side:  # its shadow falls across the street
                reach = min(height * rng.uniform(0.3, 0.9), abs(x - street.facade(-side)))
                dz = height * rng.uniform(-0.4, 0.4)
                z_from = max(z + dz, street.z_near)
                z_to = max(z1 + dz, z_from + 0.1)
                shadows.append(_ground(*sorted((x, x - side * reach)), z_from, z_to))
        z = z1


def _plan_front(rng, street, light, front, shadows):
    """Poles, street trees, vehicles and people, as (depth, draw, args) front-layer items."""
    for side in (-1, 1):
        kerb, (w_in, w_out) = street.kerb(side), street.walk[side]
        for z in np.arange(rng.uniform(3, 15), min(street.z_end, 120), rng.uniform(12, 35)):
            kind = ('light', 'light', 'sign', 'signal')[rng.integers(4)]
            front.append((z, _draw_pole, (side, w_in + side * 0.5, z, kind)))
        if rng.random() < 0.35:
            for z in np.arange(rng.uniform(4, 12), min(street.z_end, 90), rng.uniform(9, 18)):
                front.append((z, _draw_tree, (w_in + side, z, 0.8)))
                if light.sun > 0.2:  # crown shadow, kept in front of the camera (Z > 0)
                    radius = rng.uniform(1.5, 3)
                    zc = max(z + rng.uniform(-1, 1), street.z_near + radius)
                    shadows.append(_ground_disc(w_in + side, zc, radius))
        if rng.random() < 0.6:  # parked cars along the kerb
            z = rng.uniform(2, 10)
            while z < min(street.z_end, 70):
                if rng.random() < 0.75:
                    front.append((z, _draw_vehicle, (kerb - side * 1.1, z, 'car', light)))
                z += rng.uniform(5, 9)
        for _ in range(rng.poisson(3 if rng.random() < 0.8 else 10)):
            x, z = rng.uniform(min(w_in, w_out) + 0.3, max(w_in, w_out) - 0.3), rng.uniform(3, 45)
            front.append((z, _draw_person, (x, z)))
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
        front.append((z, _draw_vehicle, (x, z, kind, light)))


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
        _plan_side(rng, street, side, light, sky_colour, back, shadows)
    _plan_front(rng, street, light, front, shadows)
    _paint_ground(scene, rng, street)
    for quad in shadows:
        scene.darken(scene.project(quad), 1 - 0.5 * light.sun)
    if street.backdrop:  # a row of distant buildings closing the street, faded by haze
        x = -150.0
        while x < 150:
            x1 = x + rng.uniform(8, 30)
            colour = _pick(rng, BUILDING_COLOURS) * 0.6 + sky_colour * 0.4
            face = _front(x, x1, 0, rng.uniform(8, 45), street.z_end + rng.uniform(0, 8))
            scene.paint([face], colour, BUILDING, 0.03, 0.1)
            x = x1
    for _, draw, args in sorted(back, key=lambda item: -item[0]):  # far to near
        draw(scene, rng, *args)
    for _, draw, args in sorted(front, key=lambda item: -item[0]):
        draw(scene, rng, *args)
    if rng.random() < 0.35:  # ego-vehicle hood: ignored, as in Cityscapes
        xs = np.linspace(0, width, 24)
        bulge = height * 0.05 * ((xs - width / 2) / (width / 2)) ** 2
        top = height * (1 - rng.uniform(0.06, 0.12)) + bulge
        hood = np.round(np.concatenate([np.stack([xs, top], -1), [[width, height], [0, height]]]))
        scene.fill([hood.astype(np.int32)], _pick(rng, CAR_COLOURS, 10) * 0.7, IGNORE, 0.02, 0.2)
    return _finish(scene, rng, sky_colour), scene.labels
