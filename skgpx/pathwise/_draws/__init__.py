"""Prior draws as functions (spectra, random feature maps) and their pathwise update
(Matheron's rule): what every mode's posterior is drawn with."""
