# FNet: the real part of the 3-D DFT over (H, W, C); no parameters.
# One definition, used by the Cityscapes and the MMPretrain configs.
fnet_mixer = dict(type='FNetMixer')
