# Global filter network: a learned complex filter per channel, stored at the stage grids of the
# backbone's base_img_size (256, 128, 64, 32 for the 1024x1024 crop) and resized for other sizes.
# One definition, used by the Cityscapes and the MMPretrain configs.
gfn_mixer = dict(type='GlobalFilterMixer')
