"""The report and pictures: the HTML report page, TensorBoard eval pictures and HParams."""
