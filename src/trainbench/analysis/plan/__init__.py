"""The training plan: data scaling, epochs from the curves, the hours as a Monte Carlo distribution."""
