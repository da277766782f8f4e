"""GPflow SGPR trained with SciPy L-BFGS-B from the start of docs/results.md "gp fit against GPflow":
variance 1, length-scales 0.7, noise 0.1, y centred. Usage: python gpflow_fit.py ridge20k.csv Z500.csv MAXITER"""
import json, sys, time, numpy as np
import gpflow, tensorflow as tf
gpflow.config.set_default_float(np.float64)
data = np.loadtxt(sys.argv[1], delimiter=",", skiprows=1)
X, Y = data[:, :4], data[:, 4:5]
Y = Y - Y.mean()
Z = np.loadtxt(sys.argv[2], delimiter=",", skiprows=1)
m = gpflow.models.SGPR((X, Y), gpflow.kernels.SquaredExponential(variance=1.0, lengthscales=[0.7] * 4), inducing_variable=Z, noise_variance=0.1)
print("start", float(m.elbo()), flush=True)
t0 = time.time()
res = gpflow.optimizers.Scipy().minimize(m.training_loss, m.trainable_variables, options=dict(maxiter=int(sys.argv[3])))
print(json.dumps({"elbo": float(m.elbo()), "nit": int(res.nit), "nfev": int(res.nfev), "message": str(res.message),
                  "variance": float(m.kernel.variance.numpy()), "lengthscales": m.kernel.lengthscales.numpy().tolist(),
                  "noise": float(m.likelihood.variance.numpy()), "seconds": time.time() - t0}), flush=True)
np.savetxt("gpflow_Z_final.csv", m.inducing_variable.Z.numpy(), delimiter=",")
