# Long-Short attention (Transformer-LS, Zhu et al. 2021, arXiv:2107.02192): each query attends to
# its 8x8 window plus half a window on each side (keys from 16x16 tokens) and to 32 keys/values
# per head dynamically projected from all tokens, one softmax, DualLN. Window and rank are this
# project's choice for SegFormer-B3's stage grids (the paper's mechanism; its sizes for other
# backbones are not taken over). AFNO paper, Table 4: 80.5 mIoU.
# One definition, used by the Cityscapes and the MMPretrain configs.
ls_mixer = dict(type='LongShortAttentionMixer', window_size=8, num_landmarks=32)
