"""GPflow's SGPR ELBO at the parameters and Z of a `gp fit --json` output, with GPflow's fixed jitter
10^-6 and with dpcotrain's 10^-6 times the variance. Usage: python gpflow_eval.py FIT.json (ridge20k.csv here)"""
import json, sys, numpy as np
import gpflow
gpflow.config.set_default_float(np.float64)
data = np.loadtxt("ridge20k.csv", delimiter=",", skiprows=1)
X, Y = data[:, :4], data[:, 4:5]; Y = Y - Y.mean()
d = json.load(open(sys.argv[1]))
h = d["hyperparameters"]; Z = np.array(d["inducing"])
m = gpflow.models.SGPR((X, Y), gpflow.kernels.SquaredExponential(variance=h["variance"], lengthscales=h["lengthscales"]), inducing_variable=Z, noise_variance=h["noise"])
print("gpflow elbo at", sys.argv[1], float(m.elbo()), "ours", d["objective"])
rel = 1e-6 * h["variance"]
with gpflow.config.as_context(gpflow.config.Config(jitter=rel)):
    m2 = gpflow.models.SGPR((X, Y), gpflow.kernels.SquaredExponential(variance=h["variance"], lengthscales=h["lengthscales"]), inducing_variable=Z, noise_variance=h["noise"])
    print("gpflow elbo with jitter 1e-6*variance", float(m2.elbo()))
