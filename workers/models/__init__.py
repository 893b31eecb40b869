"""Models: every architecture Congruent builds by name (`architectures`: image and CIFAR / torchvision
ResNets; `text`: text-linear, text-bag, text-cnn, text-transformer; `hf`: Hugging Face classifiers from a local
directory), where a model starts (`starting_weights`: torchvision weights, state_dict files, the
frozen backbone), how it is kept (`checkpoints`: its settings plus a state_dict, loaded without
pickle) and its logits over a split (`predict`). Reads data descriptions from workers/data; knows
nothing of training."""
